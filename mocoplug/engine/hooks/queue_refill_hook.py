# Copyright (c) mocoplug contributors. All rights reserved.
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
    """Fill MoCo's queue with keys of this data before the first training
    step of a run whose encoders start from released weights
    (``model.encoders_from``).

    The queue starts as random unit vectors, which a trained key encoder's
    keys resemble in nothing: as negatives they are trivially told apart,
    and the first K / batch steps would train against them. Here the
    momentum encoder encodes the key views of the first
    ceil(K / total batch) batches, which are enqueued without a training
    step, so every negative of the first step is a key of this data.
    Nothing happens for runs from scratch (the paper's random start), for
    models without a queue, and on ``--resume`` (the checkpoint's queue is
    restored).
    """

    priority = 'LOW'

    @torch.no_grad()
    def before_train(self, runner: Runner) -> None:
        model = get_ori_model(runner.model)
        if not getattr(model, 'encoders_from', None) or \
                not hasattr(model, 'queue') or \
                getattr(runner, '_resume', False):
            return
        loader = runner.train_dataloader
        batch = (loader.batch_size or 1) * get_world_size()
        batches = math.ceil(model.queue.size / batch)
        done = 0
        while done < batches:  # passes over a dataset smaller than K
            for data in loader:
                data = model.data_preprocessor(data, True)
                _, im_k = model.views(data['inputs'], type(model).__name__)
                ids = None
                if model.queue.exclude_same_instance:
                    ids = sample_indices(data['data_samples'], im_k.device)
                model.queue.enqueue(model.encode_keys(im_k), ids)
                done += 1
                if done == batches:
                    break
        print_log(
            f'QueueRefillHook: the queue ({model.queue.size} keys) filled '
            f'with keys of {done} batches of this data, encoded by the key '
            f'encoder loaded from {model.encoders_from}, before the first '
            'step',
            logger='current')
