# Copyright (c) mocoplug contributors. All rights reserved.

import pytest
from mmengine.runner import Runner

from mocoplug.engine.hooks import KNNMonitorHook
from mocoplug.evaluation import extract_features, weighted_knn_accuracy
from mocoplug.visualization import load_scalars


def knn_loader(split, n):
    return dict(
        batch_size=16,
        num_workers=0,
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='default_collate'),
        dataset=dict(
            type='DigitsDataset',
            split=split,
            indices=n,
            pipeline=[dict(type='PackInputs')]))


def test_logs_the_knn_accuracy_of_the_current_backbone(tmp_path,
                                                       tiny_moco_runner_cfg):
    hooks = [
        dict(type='MomentumUpdateHook', momentum=0.99),
        dict(
            type='KNNMonitorHook',
            memory_dataloader=knn_loader('train', 64),
            query_dataloader=knn_loader('test', 32),
            interval=2,
            by_epoch=False,
            topk=(5, 20))
    ]
    runner = Runner.from_cfg(
        tiny_moco_runner_cfg(tmp_path, max_iters=3, hooks=hooks))
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, KNNMonitorHook))
    assert hook.num_classes == 10
    # recompute with the final weights: equals the last logged figures
    bank, bank_labels = extract_features(runner.model, hook.memory_dataloader)
    query, labels = extract_features(runner.model, hook.query_dataloader)
    assert bank.shape == (64, 128) and query.shape == (32, 128)
    expected = weighted_knn_accuracy(query, labels, bank, bank_labels, 10,
                                     (5, 20))
    # the same functions on the same weights in the same process as the
    # hook's last evaluation: the same figures
    assert hook.last_metrics == pytest.approx(expected)
    # evaluated at iterations 2 and 3 (interval 2, then the last one)
    knn = [r for r in load_scalars(str(tmp_path)) if 'knn/top1_k5' in r]
    assert [r['step'] for r in knn] == [2, 3]
    assert knn[-1]['knn/top1_k20'] == pytest.approx(expected['top1_k20'])
    # training mode is restored after each evaluation
    assert runner.model.training


def test_unlabelled_memory_set_is_refused(tmp_path, tiny_moco_runner_cfg):
    loader = knn_loader('train', 16)
    loader['dataset']['with_label'] = False
    hooks = [
        dict(type='MomentumUpdateHook', momentum=0.99),
        dict(
            type='KNNMonitorHook',
            memory_dataloader=loader,
            query_dataloader=knn_loader('test', 16),
            interval=1,
            by_epoch=False,
            num_classes=10)
    ]
    runner = Runner.from_cfg(
        tiny_moco_runner_cfg(tmp_path, max_iters=1, hooks=hooks))
    with pytest.raises(ValueError, match='with_label=True'):
        runner.train()
