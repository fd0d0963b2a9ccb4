# Copyright (c) mocoplug contributors. All rights reserved.
import math
from typing import Dict, List, Optional, Sequence

import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model

from mocoplug.registry import HOOKS
from .runner_info import checkpoint_due, current_lrs, mean_over_ranks

ADVICE = ('What to try: a lower learning rate; a warm-up (LinearLR); '
          'optim_wrapper.clip_grad=dict(max_norm=...); under AMP '
          "optim_wrapper.loss_scale='dynamic' or dtype='bfloat16'. Then "
          '--resume PATH from the last finite checkpoint, or start again.')


class NonFiniteLossError(FloatingPointError):
    """Raised by :class:`NonFiniteLossHook` when training diverged."""


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Stop training at the first non-finite loss, naming the iteration, the
    last finite loss, the lr, the latest checkpoint and what to try; never
    write a checkpoint of non-finite weights
    (docs/design_notes.md#non-finite-loss).

    Args:
        check_weights_before_save (bool): Check the model state before
            each checkpoint.
    """

    priority = 'HIGH'  # after RuntimeInfoHook, before CheckpointHook

    def __init__(self, check_weights_before_save: bool = True) -> None:
        self.check_weights_before_save = check_weights_before_save
        self.last_finite_loss = self.last_finite_iter = None
        self._verified_iter = None

    def after_train_iter(self,
                         runner: Runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs: Optional[Dict] = None) -> None:
        if outputs:  # as floats, from RuntimeInfoHook's hub: no host sync
            logged = runner.message_hub.log_scalars
            values = {
                key:
                float(logged[f'train/{key}'].current() if f'train/{key}' in
                      logged else value)
                for key, value in outputs.items() if 'loss' in key
            }
            bad = {k: v for k, v in values.items() if not math.isfinite(v)}
            if mean_over_ranks([bool(bad)])[0]:  # stop every rank alike
                raise NonFiniteLossError(
                    self._loss_message(runner, batch_idx, bad))
            if 'loss' in values:
                self.last_finite_loss = values['loss']
                self.last_finite_iter = runner.iter + 1
        if self.check_weights_before_save and checkpoint_due(
                runner, by_epoch=False):
            self._check_weights(runner, self._where(runner, batch_idx))

    def after_train_epoch(self, runner: Runner) -> None:
        if self.check_weights_before_save and checkpoint_due(
                runner, by_epoch=True):
            self._check_weights(
                runner,
                f'iteration {runner.iter} (end of epoch {runner.epoch + 1})')

    def before_save_checkpoint(self, runner: Runner, checkpoint: dict) -> None:
        verified, self._verified_iter = self._verified_iter, None
        if self.check_weights_before_save and verified != runner.iter:
            self._check_weights(runner, f'iteration {runner.iter}',
                                checkpoint.get('state_dict', {}))

    def _loss_message(self, runner: Runner, batch_idx: int,
                      bad: Dict[str, float]) -> str:
        where = self._where(runner, batch_idx)
        terms = ', '.join(f'{k}={v}' for k, v in bad.items()) or \
            'a non-finite loss on another rank'
        last = 'no finite loss was logged before (it diverged at once)' if \
            self.last_finite_loss is None else (
                f'the last finite loss was {self.last_finite_loss:.6g} at '
                f'iteration {self.last_finite_iter}')
        lr = current_lrs(runner) or 'lr unknown'
        return (f'NonFiniteLossHook: training diverged: {terms} at {where}; '
                f'{last}; {lr}. The run is stopped before any checkpoint of '
                'these weights is written; '
                f'{self._latest_checkpoint(runner)}. {ADVICE}')

    @staticmethod
    def _where(runner: Runner, batch_idx: Optional[int] = None) -> str:
        """'iteration N' (1-based), with epoch and batch in an epoch loop."""
        where = f'iteration {runner.iter + 1}'
        if batch_idx is not None and \
                type(runner.train_loop).__name__ != 'IterBasedTrainLoop':
            where += (f' (epoch {runner.epoch + 1}, batch {batch_idx + 1}/'
                      f'{len(runner.train_dataloader)})')
        return where

    @staticmethod
    def _latest_checkpoint(runner: Runner) -> str:
        last = runner.message_hub.get_info('last_ckpt')
        return (f'the latest checkpoint is {last}'
                if last else 'no checkpoint had been written in this run')

    def _check_weights(self, runner: Runner, where: str, state=None) -> None:
        """Raise if a floating-point tensor of ``state`` (by default the
        model's, decided over all ranks; a given ``state``, the one rank 0
        saves, on this rank alone) is not finite; a check before a
        CheckpointHook's save is not repeated at the save."""
        agree = state is None
        if state is None:
            state = get_ori_model(runner.model).state_dict()
            self._verified_iter = runner.iter
        names: List[str] = [
            n for n, t in state.items()
            if isinstance(t, torch.Tensor) and t.is_floating_point()
        ]
        if not names:
            return
        device = state[names[0]].device
        ok: Sequence[bool] = torch.stack([
            torch.isfinite(state[n]).all().to(device) for n in names
        ]).tolist()
        bad = [n for n, good in zip(names, ok) if not good]
        if (mean_over_ranks([bool(bad)])[0] if agree else bad):
            shown = ', '.join(bad[:5]) + (f' and {len(bad) - 5} more' if len(
                bad) > 5 else '') or 'on another rank'
            loss = '' if self.last_finite_loss is None else \
                f' ({self.last_finite_loss:.6g})'
            raise NonFiniteLossError(
                f'NonFiniteLossHook: the model holds non-finite values '
                f'after {where} ({shown}) although the logged loss was '
                f'finite{loss}; {current_lrs(runner) or "lr unknown"}. '
                'The run is stopped before the checkpoint is written; '
                f'{self._latest_checkpoint(runner)}. {ADVICE}')
