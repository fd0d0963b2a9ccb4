# Copyright (c) mocoplug contributors. All rights reserved.
import itertools
import math

import torch
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model

from mocoplug.models.algorithms.moco import sample_indices
from mocoplug.registry import HOOKS


@HOOKS.register_module()
class QueueRefillHook(Hook):
    """Fill the queue (MoCo's, or a MoCo v3 with one) with keys of
    ceil(K / total batch) batches of this data before the first step of a
    run whose encoders start from released weights (``model.encoders_from``);
    not from scratch, not when a checkpoint was resumed, nor without a
    queue. After ``ExactResumeHook`` (priority 89) has set up the workers'
    seeding, so an uninterrupted run and a resumed one load alike."""

    priority = 'VERY_LOW'

    @torch.no_grad()
    def before_train(self, runner: Runner) -> None:
        model = get_ori_model(runner.model)
        if not getattr(model, 'encoders_from', None) or getattr(
                model, 'queue', None) is None or runner.iter > 0:
            return
        loader = runner.train_dataloader
        batch = (loader.batch_size or 1) * get_world_size()
        batches = math.ceil(model.queue.size / batch)
        passes = itertools.chain.from_iterable(itertools.repeat(loader))
        for data in itertools.islice(passes, batches):  # K may exceed data
            data = model.data_preprocessor(data, True)
            _, im_k = model.views(data['inputs'], type(model).__name__)
            ids = None
            if model.queue.exclude_same_instance:
                ids = sample_indices(data['data_samples'], im_k.device)
            model.queue.enqueue(model.encode_keys(im_k), ids)
        print_log(
            f'QueueRefillHook: the queue ({model.queue.size} keys) filled '
            f'with keys of {batches} batches of this data',
            logger='current')
