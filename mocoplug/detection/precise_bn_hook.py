# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Optional

import torch
from mmdet.registry import HOOKS
from mmengine.dataset import DefaultSampler
from mmengine.dist import all_reduce, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.runner import EpochBasedTrainLoop, Runner
from mmpretrain.utils import get_ori_model
from torch.utils.data import DataLoader

from mocoplug.models.utils.precise_bn import precise_bn_stats


@HOOKS.register_module()
class DetectionPreciseBNHook(Hook):
    """Recompute a detector's BN statistics before it is evaluated, as
    detectron2's ``TEST.PRECISE_BN`` of the MoCo detection configs (`He et
    al., CVPR 2020 <https://arxiv.org/abs/1911.05722>`_; `Wu and Johnson,
    2021 <https://arxiv.org/abs/2105.07576>`_): the average batch statistics
    of ``num_iters`` batches of a separate training loader.

    Args:
        num_iters (int): Batches per process (``TEST.PRECISE_BN.NUM_ITER``).
        interval (int): Every ``interval`` iterations or epochs, and after
            the last one (before its checkpoint); 0: only at the end.
    """

    priority = 'ABOVE_NORMAL'  # before CheckpointHook (VERY_LOW)

    def __init__(self, num_iters: int = 200, interval: int = 0) -> None:
        if not isinstance(num_iters, int) or num_iters < 1:
            raise ValueError('DetectionPreciseBNHook: num_iters must be a '
                             f'positive int, got {num_iters!r}')
        if not isinstance(interval, int) or interval < 0:
            raise ValueError('DetectionPreciseBNHook: interval must be an int '
                             f'>= 0 (0: only at the end), got {interval!r}')
        self.num_iters, self.interval, self._calls = num_iters, interval, 0

    def precise_bn_loader(self, runner: Runner) -> DataLoader:
        """A loader like the training loader, with its own shuffled order."""
        train = runner.train_dataloader
        sampler = DefaultSampler(
            train.dataset, shuffle=True, seed=runner.seed or 0)
        sampler.set_epoch(self._calls)
        old = train.batch_sampler
        if old is None:
            raise ValueError('DetectionPreciseBNHook needs a batch_size')
        return DataLoader(
            train.dataset,
            batch_sampler=type(old)(
                sampler, batch_size=old.batch_size, drop_last=old.drop_last),
            num_workers=train.num_workers,
            collate_fn=train.collate_fn,
            pin_memory=train.pin_memory,
            worker_init_fn=train.worker_init_fn)

    def run(self, runner: Runner) -> None:
        """Recompute the BN statistics of ``runner.model``."""
        model = get_ori_model(runner.model)
        model.train()
        loader = self.precise_bn_loader(runner)
        num_iters = min_across_processes(
            min(self.num_iters, len(loader)),
            next(model.parameters()).device)
        count = precise_bn_stats(model, loader, num_iters)
        self._calls += 1
        print_log(
            f'DetectionPreciseBNHook: BN statistics recomputed over {count} '
            'training batches' if count else
            'DetectionPreciseBNHook: no BN layer in training mode (or no '
            'data), statistics left unchanged',
            logger='current')

    def after_train_iter(self,
                         runner: Runner,
                         batch_idx: int,
                         data_batch: Optional[dict] = None,
                         outputs: Optional[dict] = None) -> None:
        if not isinstance(runner.train_loop, EpochBasedTrainLoop) and (
                self.every_n_train_iters(runner, self.interval)
                or self.is_last_train_iter(runner)):
            self.run(runner)

    def after_train_epoch(self, runner: Runner) -> None:
        if isinstance(runner.train_loop, EpochBasedTrainLoop) and (
                self.every_n_epochs(runner, self.interval)
                or self.is_last_train_epoch(runner)):
            self.run(runner)


def min_across_processes(value: int, device: torch.device) -> int:
    """The smallest ``value`` over all processes."""
    if get_world_size() == 1:
        return value
    tensor = torch.tensor(value, device=device)
    all_reduce(tensor, op='min')
    return int(tensor.item())
