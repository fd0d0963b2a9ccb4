# Copyright (c) mocoplug contributors. All rights reserved.
import math

import pytest
import torch
import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.registry import HOOKS


class PairModel(nn.Module):
    """The smallest model declaring a momentum pair."""

    def __init__(self):
        super().__init__()
        self.online = nn.Linear(3, 2)
        self.target = nn.Linear(3, 2)

    def momentum_pairs(self):
        return [(self.online, self.target)]


def momentum_hook(runner):
    return next(h for h in runner.hooks if isinstance(h, MomentumUpdateHook))


def test_update_math(on_device):
    model = PairModel().double()
    hook = MomentumUpdateHook(momentum=0.9)
    hook.attach(model)
    q = [p.detach().clone() for p in model.online.parameters()]
    k = [p.detach().clone() for p in model.target.parameters()]
    versions = [p._version for p in model.target.parameters()]
    hook.update(0.9)
    # every write is visible to the model's missing-hook check, also where
    # the fused CUDA kernel does not bump the counters itself
    assert all(p._version > v
               for p, v in zip(model.target.parameters(), versions))
    for p_k, old_k, p_q in zip(model.target.parameters(), k, q):
        # float64, weights |w| <= 0.58: both forms (lerp, and the sum below)
        # are within 4 x 2^-53 x 0.58 < 3e-16 of the exact value (a float32
        # bound, 1.4e-7, exceeded the old atol=1e-7 where 0.9 k + 0.1 q ~ 0)
        expected = 0.9 * old_k + 0.1 * p_q
        assert torch.allclose(p_k, expected, rtol=0, atol=1e-14)
    assert hook.num_updates == 1
    # the online module is untouched
    for p, old in zip(model.online.parameters(), q):
        assert torch.equal(p, old)


def test_schedule_endpoints():
    constant = MomentumUpdateHook(momentum=0.999)
    assert constant.momentum_at(0, 100) == constant.momentum_at(100, 100) \
        == 0.999
    cosine = MomentumUpdateHook(momentum=0.99, schedule='cosine')
    assert cosine.momentum_at(0, 100) == pytest.approx(0.99)
    assert cosine.momentum_at(50, 100) == pytest.approx(0.995)
    assert cosine.momentum_at(100, 100) == pytest.approx(1.0)
    # m_t = 1 - (1 - m0) (cos(pi t / T) + 1) / 2
    assert cosine.momentum_at(
        30, 100) == pytest.approx(1 - 0.01 * (math.cos(math.pi * 0.3) + 1) / 2)


def test_mmpretrain_convention_is_refused_with_the_fix():
    with pytest.raises(ValueError, match='use momentum=0.999'):
        MomentumUpdateHook(momentum=0.001)
    with pytest.raises(ValueError, match='schedule'):
        MomentumUpdateHook(schedule='linear')
    with pytest.raises(ValueError, match='<= 1'):
        MomentumUpdateHook(end_momentum=1.5)


def test_model_without_pairs_is_refused():
    with pytest.raises(TypeError, match='momentum_pairs'):
        MomentumUpdateHook().attach(nn.Linear(2, 2))


@HOOKS.register_module(force=True)
class RecordQueryParamsHook(Hook):
    """Keeps the query encoder's parameters after every optimizer step."""
    priority = 'HIGHEST'  # before MomentumUpdateHook

    def before_train(self, runner):
        self.history = [self.snapshot(runner)]

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None):
        self.history.append(self.snapshot(runner))

    @staticmethod
    def snapshot(runner):
        model = runner.model
        return [
            p.detach().clone() for online, _ in model.momentum_pairs()
            for p in online.parameters()
        ]


def test_hook_in_a_real_runner(tmp_path, tiny_moco_runner_cfg, device):
    cfg = tiny_moco_runner_cfg(
        tmp_path,
        max_iters=3,
        hooks=[
            dict(type='MomentumUpdateHook', momentum=0.9),
            dict(type='RecordQueryParamsHook')
        ])
    runner = Runner.from_cfg(cfg)
    runner.train()
    record = next(
        h for h in runner.hooks if isinstance(h, RecordQueryParamsHook))
    expected = record.history[0]  # both encoders start equal
    for params in record.history[1:]:
        expected = [0.9 * k + 0.1 * q for k, q in zip(expected, params)]
    actual = [
        p for _, target in runner.model.momentum_pairs()
        for p in target.parameters()
    ]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        # float32 (a real run): 3 updates of 3 roundings each, on either
        # side, are within 18 u max(|k|, |q|) <= 1.1e-6 (|e| + |q - k|) of
        # the exact value, and q - k (3 SGD steps) is far below 1: covered
        # by 1e-5 |e| + 1e-6
        assert torch.allclose(a, e, rtol=1e-5, atol=1e-6)
    assert momentum_hook(runner).num_updates == 3
    logged = runner.message_hub.get_scalar('train/momentum').data[0]
    assert logged.tolist() == [0.9, 0.9, 0.9]


def test_cosine_schedule_and_gradient_accumulation(tmp_path,
                                                   tiny_moco_runner_cfg):
    cfg = tiny_moco_runner_cfg(
        tmp_path,
        max_iters=4,
        hooks=[
            dict(type='MomentumUpdateHook', momentum=0.99, schedule='cosine')
        ])
    cfg.optim_wrapper.accumulative_counts = 2
    runner = Runner.from_cfg(cfg)
    runner.train()
    # one update per real optimizer step: after iterations 1 and 3
    assert momentum_hook(runner).num_updates == 2
    logged = runner.message_hub.get_scalar('train/momentum').data[0]
    expected = [1 - 0.01 * (math.cos(math.pi * t / 4) + 1) / 2 for t in (2, 4)]
    assert logged.tolist() == pytest.approx(expected)


class SimulatedCrash(Exception):
    pass


@HOOKS.register_module(force=True)
class CrashAfterHook(Hook):
    """Raises after iteration `after` once its checkpoint is written."""
    priority = 'LOWEST'  # after CheckpointHook

    def __init__(self, after):
        self.after = after

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None):
        if runner.iter + 1 == self.after:
            raise SimulatedCrash


def test_resume_continues_the_schedule(tmp_path, tiny_moco_runner_cfg):
    hooks = [dict(type='MomentumUpdateHook', momentum=0.99, schedule='cosine')]
    first = tiny_moco_runner_cfg(
        tmp_path / 'a',
        max_iters=4,
        hooks=hooks + [dict(type='CrashAfterHook', after=2)])
    first.default_hooks.checkpoint.interval = 2
    with pytest.raises(SimulatedCrash):
        Runner.from_cfg(first).train()
    ckpt = tmp_path / 'a' / 'iter_2.pth'
    second = tiny_moco_runner_cfg(
        tmp_path / 'b',
        max_iters=4,
        hooks=hooks,
        resume=True,
        load_from=str(ckpt))
    resumed = Runner.from_cfg(second)
    resumed.train()
    logged = resumed.message_hub.get_scalar('train/momentum').data[0]
    expected = [
        1 - 0.01 * (math.cos(math.pi * t / 4) + 1) / 2 for t in (1, 2, 3, 4)
    ]
    assert logged.tolist() == pytest.approx(expected)
    state = torch.load(tmp_path / 'b' / 'iter_4.pth', weights_only=False)
    assert int(state['state_dict']['queue.ptr']) == (4 * 8) % 48


def test_training_without_the_hook_fails_at_the_second_iteration(
        tmp_path, tiny_moco_runner_cfg):
    """Even without MoCoConfigCheckHook (not in this config), the model
    refuses the training forward after an optimizer step that left the
    key encoder where it was."""
    runner = Runner.from_cfg(
        tiny_moco_runner_cfg(tmp_path, max_iters=3, hooks=[]))
    with pytest.raises(RuntimeError, match="type='MomentumUpdateHook'"):
        runner.train()
    assert runner.iter == 1  # the first iteration ran, the second failed


@HOOKS.register_module(force=True)
class RecordStartHook(Hook):
    """The model's tensors once initialised, before the first step."""

    def before_train(self, runner):
        self.start = {
            k: v.clone()
            for k, v in runner.model.state_dict().items()
        }


def test_a_frozen_key_encoder_trains(tmp_path, tiny_moco_runner_cfg):
    """m = 1 (the key encoder frozen at its initial weights, an ablation):
    the constructor accepts it, the run trains, the key encoder never
    moves while the query encoder does."""
    cfg = tiny_moco_runner_cfg(
        tmp_path,
        max_iters=3,
        hooks=[
            dict(type='MomentumUpdateHook', momentum=1.0),
            dict(type='RecordStartHook')
        ])
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 3
    start = next(
        h for h in runner.hooks if type(h).__name__ == 'RecordStartHook').start
    end = runner.model.state_dict()
    frozen = [k for k, p in runner.model.momentum_encoder.named_parameters()]
    assert frozen
    for key in frozen:
        key = f'momentum_encoder.{key}'
        assert torch.equal(end[key], start[key]), key
    assert not torch.equal(end['backbone.conv1.weight'],
                           start['backbone.conv1.weight'])
