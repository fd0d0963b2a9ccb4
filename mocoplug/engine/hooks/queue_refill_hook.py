# Copyright (c) mocoplug contributors. All rights reserved.
import itertools
import math
from typing import Iterator

import torch
from mmengine.dataset import InfiniteSampler
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model
from torch.utils.data import DataLoader

from mocoplug.models.algorithms.moco import sample_indices
from mocoplug.registry import HOOKS
from .runner_info import loader_batch_size


def refill_batches(loader: DataLoader, seed: int) -> Iterator:
    """Batches of ``loader``'s dataset, batch size, collate function and
    workers (not persistent) from their own ``InfiniteSampler`` (seeded
    apart from the run's first epoch; the train loop's loader, sampler and
    iterator untouched). A dataset without a length: passes over
    ``loader`` itself, an empty one refused."""
    try:
        size = len(loader.dataset)
    except TypeError:
        return _passes(loader)
    if size == 0:  # an infinite sampler would spin
        raise ValueError('QueueRefillHook: the training dataset is empty')
    return iter(
        DataLoader(
            loader.dataset,
            batch_size=loader_batch_size(loader),
            sampler=InfiniteSampler(
                loader.dataset, shuffle=True, seed=seed + 1_000_003),
            num_workers=loader.num_workers,
            collate_fn=loader.collate_fn,
            worker_init_fn=loader.worker_init_fn,
            drop_last=True))


def _passes(loader: DataLoader) -> Iterator:
    while True:
        seen = 0
        for seen, data in enumerate(loader, 1):
            yield data
        if not seen:
            raise ValueError('QueueRefillHook: the train loader is empty')


@HOOKS.register_module()
class QueueRefillHook(Hook):
    """Fill the queue (MoCo's, or a MoCo v3 with one) with keys of
    ceil(K / total batch) batches of this data before the first step of a
    run whose encoders start from released weights (``model.encoders_from``);
    not from scratch, not when a checkpoint was resumed, nor without a
    queue. The batches come from :func:`refill_batches` (K may exceed the
    data: it repeats), never from the train loop's loader."""

    priority = 'VERY_LOW'

    @torch.no_grad()
    def before_train(self, runner: Runner) -> None:
        model = get_ori_model(runner.model)
        if not getattr(model, 'encoders_from', None) or getattr(
                model, 'queue', None) is None or runner.iter > 0:
            return
        loader = runner.train_dataloader
        batch = loader_batch_size(loader) * get_world_size()
        batches = math.ceil(model.queue.size / batch)
        iterator = refill_batches(loader, int(runner.seed))
        try:
            for data in itertools.islice(iterator, batches):
                data = model.data_preprocessor(data, True)
                _, im_k = model.views(data['inputs'], type(model).__name__)
                ids = None
                if model.queue.exclude_same_instance:
                    ids = sample_indices(data['data_samples'], im_k.device)
                model.queue.enqueue(model.encode_keys(im_k), ids)
        finally:  # (a DataLoader's iterator with workers)
            getattr(iterator, '_shutdown_workers', lambda: None)()
        print_log(
            f'QueueRefillHook: the queue ({model.queue.size} keys) filled '
            f'with keys of {batches} batches of this data', 'current')
