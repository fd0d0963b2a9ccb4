# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, Optional, Sequence, Union

from mmengine.hooks import Hook
from mmengine.runner import Runner
from torch.utils.data import DataLoader

from mocoplug.evaluation import (extract_feature_shard,
                                 sharded_weighted_knn_accuracy)
from mocoplug.registry import HOOKS


@HOOKS.register_module()
class KNNMonitorHook(Hook):
    """Evaluate weighted kNN top-1 of the backbone during pretraining.

    Every ``interval`` epochs (or iterations with ``by_epoch=False``) the
    backbone encodes a labelled memory set and a labelled query set, and
    each query is classified by the weighted vote of its k nearest memory
    features (`Wu et al., CVPR 2018 <https://arxiv.org/abs/1805.01978>`_,
    the monitor used in `MoCo <https://arxiv.org/abs/1911.05722>`_'s
    ablations). Labels never reach the training loss. The accuracies (in
    percent) are logged and written to the visualizer backends as
    ``knn/top1_k{k}``, so ``tools/analysis_tools/plot_curves.py`` can draw
    them. Neither the official MoCo code nor mmpretrain monitors kNN during
    pretraining.

    In a distributed run every rank encodes its share of both sets and
    keeps it on its device; the neighbours are searched shard by shard and
    merged (:func:`~mocoplug.evaluation.sharded_weighted_knn_accuracy`), so
    no rank gathers the memory and all ranks work and log the same figures.

    Args:
        memory_dataloader (dict | DataLoader): Labelled images whose
            features vote (e.g. the train split, with the val pipeline).
        query_dataloader (dict | DataLoader): Labelled images to classify
            (e.g. the val split).
        interval (int): Evaluate every ``interval`` epochs/iterations, and
            after the last one. Defaults to 1.
        by_epoch (bool): Count ``interval`` in epochs. Defaults to True.
        topk (Sequence[int]): Numbers of neighbours. Defaults to (20, 200).
        temperature (float): Vote temperature. Defaults to 0.07.
        num_classes (int, optional): Number of classes; by default the
            length of the memory dataset's ``metainfo['classes']``.
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
        self.interval = interval
        self.by_epoch = by_epoch
        self.topk = tuple(topk)
        self.temperature = temperature
        self.num_classes = num_classes
        self.last_metrics: Dict[str, float] = {}

    def before_train(self, runner: Runner) -> None:
        """Build the two dataloaders once."""
        if isinstance(self.memory_dataloader, dict):
            self.memory_dataloader = runner.build_dataloader(
                self.memory_dataloader, seed=runner.seed)
        if isinstance(self.query_dataloader, dict):
            self.query_dataloader = runner.build_dataloader(
                self.query_dataloader, seed=runner.seed)
        if self.num_classes is None:
            classes = self.memory_dataloader.dataset.metainfo.get('classes')
            if not classes:
                raise ValueError(
                    'KNNMonitorHook: the memory dataset declares no classes '
                    'in its metainfo; set num_classes in the hook config')
            self.num_classes = len(classes)

    def evaluate(self, runner: Runner, step: int) -> Dict[str, float]:
        """Run the kNN evaluation now and log it at ``step`` (the number of
        finished training iterations)."""
        # Each rank keeps the features it computed, on its device; the
        # ranks find the neighbours together and agree on the figures.
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
        return metrics

    def after_train_epoch(self, runner: Runner) -> None:
        if self.by_epoch and (self.every_n_epochs(runner, self.interval)
                              or self.is_last_train_epoch(runner)):
            self.evaluate(runner, step=runner.iter)

    def after_train_iter(self,
                         runner: Runner,
                         batch_idx: int,
                         data_batch: Optional[dict] = None,
                         outputs: Optional[dict] = None) -> None:
        if not self.by_epoch and (self.every_n_train_iters(
                runner, self.interval) or self.is_last_train_iter(runner)):
            self.evaluate(runner, step=runner.iter + 1)
