# Copyright (c) mocoplug contributors. All rights reserved.
import math

import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model

from mocoplug.registry import HOOKS
from .runner_info import optim_wrappers

SCHEDULES = ('constant', 'cosine')


@HOOKS.register_module()
class MomentumUpdateHook(Hook):
    r"""Update momentum (key) encoders after every optimizer step.

    For every (online, momentum) pair of ``momentum_pairs()``,
    :math:`\theta_k \leftarrow m \theta_k + (1 - m) \theta_q` with m the
    paper's momentum (`MoCo <https://arxiv.org/abs/1911.05722>`_, Sec.
    3.2); values below 0.5 (mmpretrain's EMA convention) are refused.
    ``'cosine'`` goes from ``momentum`` to ``end_momentum`` as in `MoCo v3
    <https://arxiv.org/abs/2104.02057>`_:
    :math:`m_t = m_{end} - (m_{end} - m_0)(\cos(\pi t / T) + 1) / 2`, T
    ``runner.max_iters``, t = i + 1 after iteration i. Parameters only, once
    per real optimizer step (docs/design_notes.md, "The momentum update").
    Outside a Runner, call :meth:`attach` once and :meth:`update` after
    every optimizer step.

    Args:
        momentum (float): m, or m_0 for the cosine schedule.
        schedule (str): ``'constant'`` (MoCo v1/v2) or ``'cosine'``.
        end_momentum (float): Final m of the cosine schedule.
    """

    priority = 'NORMAL'  # before CheckpointHook (VERY_LOW) saves the step

    def __init__(self,
                 momentum: float = 0.999,
                 schedule: str = 'constant',
                 end_momentum: float = 1.0) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f'MomentumUpdateHook: schedule must be one of '
                             f'{SCHEDULES}, got {schedule!r}')
        for name, value in (('momentum', momentum), ('end_momentum',
                                                     end_momentum)):
            if value < 0.5:
                raise ValueError(
                    f'MomentumUpdateHook: {name}={value} looks like '
                    "mmpretrain's convention; mocoplug uses the paper's m: "
                    f'use {name}={1 - value:g}.')
            if value > 1.0:
                raise ValueError(
                    f'MomentumUpdateHook: {name}={value} must be <= 1.')
        self.momentum, self.schedule = momentum, schedule
        self.end_momentum = end_momentum
        self._online, self._target = [], []
        self._attached, self.num_updates = False, 0

    def momentum_at(self, step: int, max_steps: int) -> float:
        """The momentum m of the update that prepares step ``step``."""
        if self.schedule == 'constant':
            return self.momentum
        progress = min(step / max(max_steps, 1), 1.0)
        cos = (math.cos(math.pi * progress) + 1) / 2
        return self.end_momentum - (self.end_momentum - self.momentum) * cos

    def before_train(self, runner: Runner) -> None:
        """Collect the parameter pairs once; they stay the same tensors."""
        self.attach(get_ori_model(runner.model))

    def attach(self, model: torch.nn.Module) -> None:
        """Bind to a model that declares ``momentum_pairs()``."""
        if not callable(getattr(model, 'momentum_pairs', None)):
            raise TypeError(
                f'MomentumUpdateHook: {type(model).__name__} declares no '
                'momentum_pairs(); remove the hook from custom_hooks.')
        online, target = [], []
        for module, twin in model.momentum_pairs():  # (online, momentum)
            src, dst = list(module.parameters()), list(twin.parameters())
            if len(src) != len(dst) or any(a.shape != b.shape
                                           for a, b in zip(src, dst)):
                raise RuntimeError(
                    'MomentumUpdateHook: a momentum module does not mirror '
                    f'its online module ({type(module).__name__}).')
            online += [p for p in src if p.is_floating_point()]
            target += [p for p in dst if p.is_floating_point()]
        self._online, self._target, self._attached = online, target, True

    @torch.no_grad()
    def update(self, momentum: float) -> None:
        """Apply one update with the given m to the attached model."""
        if not self._attached:
            raise RuntimeError('MomentumUpdateHook.update() before attach()')
        if momentum < 1.0:
            torch._foreach_lerp_(self._target, self._online, 1.0 - momentum)
        torch.autograd.graph.increment_version(self._target)
        self.num_updates += 1

    def after_train_iter(self, runner: Runner, batch_idx, **kwargs) -> None:
        if not _optimizer_stepped(runner.optim_wrapper):
            return
        momentum = self.momentum_at(runner.iter + 1, runner.max_iters)
        self.update(momentum)
        runner.message_hub.update_scalar('train/momentum', momentum)


def _optimizer_stepped(optim_wrapper) -> bool:
    """Whether the last ``update_params`` stepped (not accumulating)."""
    return any(
        not callable(getattr(w, 'should_update', None)) or w.should_update()
        for w in optim_wrappers(optim_wrapper))
