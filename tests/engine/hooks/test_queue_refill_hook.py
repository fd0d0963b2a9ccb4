# Copyright (c) mocoplug contributors. All rights reserved.
"""QueueRefillHook: with model.encoders_from, every negative of the first
step is a key of this data encoded by the loaded key encoder."""
import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mocoplug.registry import HOOKS


@HOOKS.register_module(force=True)
class QueueSpy(Hook):
    """The queue at the start of training and before the first step."""
    priority = 'VERY_HIGH'
    seen = {}

    def before_train(self, runner):
        QueueSpy.seen['start'] = runner.model.queue().clone()

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == 0:
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
