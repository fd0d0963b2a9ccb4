# Copyright (c) mocoplug contributors. All rights reserved.
"""QueueRefillHook: with model.encoders_from, every negative of the first
step is a key of this data encoded by the loaded key encoder."""
import pytest
import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mocoplug.registry import HOOKS, MODELS


@HOOKS.register_module(force=True)
class QueueSpy(Hook):
    """The queue at the start of training and before the first step."""
    priority = 'VERY_HIGH'
    seen = {}

    def before_train(self, runner):
        QueueSpy.seen['key encoder'] = {
            k: v.clone()
            for k, v in runner.model.momentum_encoder.state_dict().items()
        }
        if runner.model.queue is not None:
            QueueSpy.seen['start'] = runner.model.queue().clone()

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == 0 and runner.model.queue is not None:
            QueueSpy.seen['first step'] = runner.model.queue().clone()


def run(cfg):
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner


def test_the_queue_holds_only_keys_of_this_data_at_the_first_step(
        tmp_path, tiny_moco_runner_cfg):
    hooks = [
        dict(type='MomentumUpdateHook', momentum=0.99),
        dict(type='QueueSpy')
    ]
    cfg = tiny_moco_runner_cfg(tmp_path / 'released', max_iters=1)
    released = run(cfg)
    path = str(tmp_path / 'released.pth')
    torch.save(dict(state_dict=released.model.state_dict()), path)
    # 44 keys, batch 8: 6 batches fill it (48 keys), then 1 step of 8
    cfg = tiny_moco_runner_cfg(
        tmp_path / 'continued', max_iters=1, hooks=hooks)
    cfg.model.update(encoders_from=path)
    cfg.model.queue.size = 44
    cfg.default_hooks.queue_refill = dict(type='QueueRefillHook')
    cfg.resume = True  # a script that always passes --resume: none found
    runner = run(cfg)
    start, first = QueueSpy.seen['start'], QueueSpy.seen['first step']
    # no random initial key is left, every slot holds a unit key
    assert not (first[:, None] == start[None]).all(-1).any()
    assert torch.allclose(first.norm(dim=1), torch.ones(44), atol=1e-5)
    runner.model.queue()  # writes the last step's pending keys
    assert int(runner.model.queue.ptr) == (48 + 8) % 44
    # from scratch nothing is filled: the queue is the paper's random one
    cfg = tiny_moco_runner_cfg(tmp_path / 'scratch', max_iters=1, hooks=hooks)
    cfg.model.queue.size = 44
    cfg.default_hooks.queue_refill = dict(type='QueueRefillHook')
    runner = run(cfg)
    assert torch.equal(QueueSpy.seen['start'], QueueSpy.seen['first step'])
    runner.model.queue()
    assert int(runner.model.queue.ptr) == 8


@pytest.mark.parametrize('queue', [44, None], ids=['queue', 'in-batch'])
def test_mocov3_continued_from_released_weights(tmp_path, queue,
                                                tiny_moco_runner_cfg):
    """MoCo v3 with ``encoders_from``: with a queue, filled as v1/v2's
    (its keys by the loaded momentum encoder); without one, nothing to
    fill and the run trains (it stopped before its first step: issue 36)."""
    cfg = tiny_moco_runner_cfg(
        tmp_path / 'v3',
        max_iters=1,
        hooks=[
            dict(type='MomentumUpdateHook', momentum=0.99),
            dict(type='QueueSpy')
        ])
    mlp = dict(type='MoCoProjectionNeck', hid_channels=32, out_channels=32)
    cfg.model = dict(
        type='MoCoV3',
        data_preprocessor=cfg.model.data_preprocessor,
        backbone=cfg.model.backbone,
        neck=dict(mlp, in_channels=128),
        predictor=dict(mlp, in_channels=32, with_avg_pool=False),
        head=dict(
            type='InfoNCEHead',
            temperature=1.0,
            loss=dict(type='CrossEntropyLoss', loss_weight=2.0)),
        queue=queue and dict(type='NegativeKeyQueue', size=queue, dim=32))
    released = MODELS.build(cfg.model)
    path = str(tmp_path / 'released.pth')
    torch.save(dict(state_dict=released.state_dict()), path)
    cfg.model.encoders_from = path
    cfg.default_hooks.queue_refill = dict(type='QueueRefillHook')
    QueueSpy.seen.clear()
    runner = run(cfg)
    assert runner.iter == 1
    # the key encoder of the refill is the released query encoder
    for name, value in released.backbone.state_dict().items():
        assert torch.equal(QueueSpy.seen['key encoder'][f'backbone.{name}'],
                           value), name
    if queue is None:
        assert 'start' not in QueueSpy.seen  # no queue to look at
        return
    start, first = QueueSpy.seen['start'], QueueSpy.seen['first step']
    assert not (first[:, None] == start[None]).all(-1).any()
    assert torch.allclose(first.norm(dim=1), torch.ones(44), atol=1e-5)
    runner.model.queue()
    assert int(runner.model.queue.ptr) == (48 + 16) % 44  # 2 views a step
