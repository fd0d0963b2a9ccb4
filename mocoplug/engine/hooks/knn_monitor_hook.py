# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, Optional, Sequence, Union

from mmengine.hooks import Hook
from mmengine.runner import Runner
from torch.utils.data import DataLoader

from mocoplug.evaluation import (check_one_pass, extract_feature_shard,
                                 sharded_weighted_knn_accuracy)
from mocoplug.registry import HOOKS


@HOOKS.register_module()
class KNNMonitorHook(Hook):
    """Evaluate weighted kNN top-1 of the backbone during pretraining.

    The weighted vote of the k nearest memory features (`Wu et al., CVPR
    2018 <https://arxiv.org/abs/1805.01978>`_, the monitor of `MoCo
    <https://arxiv.org/abs/1911.05722>`_'s ablations), logged as
    ``knn/top1_k{k}`` (%); each rank keeps its share of the features.

    Args:
        memory_dataloader (dict | DataLoader): Labelled images that vote.
        query_dataloader (dict | DataLoader): Labelled images to classify.
        interval (int): Evaluate every ``interval`` epochs/iterations, and
            after the last one.
        by_epoch (bool): Count ``interval`` in epochs.
        topk (Sequence[int]): Numbers of neighbours, each capped at the
            memory size; logged under the k used.
        temperature (float): Vote temperature.
        num_classes (int, optional): By default the memory dataset's
            number of ``metainfo['classes']``.
    """

    priority = 'LOW'  # after the optimizer step and the momentum update

    def __init__(self,
                 memory_dataloader: Union[dict, DataLoader],
                 query_dataloader: Union[dict, DataLoader],
                 interval: int = 1,
                 by_epoch: bool = True,
                 topk: Sequence[int] = (20, 200),
                 temperature: float = 0.07,
                 num_classes: Optional[int] = None) -> None:
        if interval < 1:
            raise ValueError(f'KNNMonitorHook: interval must be >= 1, got '
                             f'{interval}')
        self.memory_dataloader = memory_dataloader
        self.query_dataloader = query_dataloader
        self.interval, self.by_epoch = interval, by_epoch
        self.topk, self.temperature = tuple(topk), temperature
        self.num_classes = num_classes
        self.last_metrics: Dict[str, float] = {}

    def before_train(self, runner: Runner) -> None:
        """Build the two dataloaders once."""
        for name in ('memory_dataloader', 'query_dataloader'):
            loader = getattr(self, name)
            if isinstance(loader, dict):
                setattr(self, name,
                        runner.build_dataloader(loader, seed=runner.seed))
            check_one_pass(getattr(self, name), f'KNNMonitorHook.{name}')
        if self.num_classes is None:
            classes = self.memory_dataloader.dataset.metainfo.get('classes')
            if not classes:
                raise ValueError(
                    'KNNMonitorHook: the memory dataset declares no classes '
                    'in its metainfo; set num_classes in the hook config')
            self.num_classes = len(classes)

    def evaluate(self, runner: Runner, step: int) -> None:
        """Evaluate now; log at ``step`` (finished training iterations)."""
        bank = extract_feature_shard(runner.model, self.memory_dataloader)
        query = extract_feature_shard(runner.model, self.query_dataloader)
        metrics = self.last_metrics = sharded_weighted_knn_accuracy(
            query, bank, self.num_classes, self.topk, self.temperature)
        del bank, query
        scalars = {f'knn/{k}': v for k, v in metrics.items()}
        runner.visualizer.add_scalars(scalars, step=step)
        figures = ', '.join(f'{k} {v:.2f}' for k, v in metrics.items())
        runner.logger.info(
            f'kNN (weighted, t={self.temperature}) at iteration {step}: '
            f'{figures}')

    def after_train_epoch(self, runner: Runner) -> None:
        if self.by_epoch and (self.every_n_epochs(runner, self.interval)
                              or self.is_last_train_epoch(runner)):
            self.evaluate(runner, step=runner.iter)

    def after_train_iter(self, runner: Runner, batch_idx, **kwargs) -> None:
        if not self.by_epoch and (self.every_n_train_iters(
                runner, self.interval) or self.is_last_train_iter(runner)):
            self.evaluate(runner, step=runner.iter + 1)
