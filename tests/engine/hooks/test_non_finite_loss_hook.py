# Copyright (c) mocoplug contributors. All rights reserved.
import glob
import math
import os
import re

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mocoplug.engine.hooks import NonFiniteLossError, NonFiniteLossHook
from mocoplug.registry import HOOKS
from ...conftest import unique_experiment_name

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DIGITS = os.path.join(
    ROOT, 'configs',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
# The command (lr 1e8), scaled down: 64 digits, 4 batches of 16 per
# epoch, a checkpoint after every iteration.
DIVERGING = [
    'optim_wrapper.optimizer.lr=1e8', 'train_dataloader.dataset.indices=64',
    'train_dataloader.batch_size=16', 'train_cfg.max_epochs=3',
    'default_hooks.checkpoint.by_epoch=False',
    'default_hooks.checkpoint.interval=1',
    'default_hooks.checkpoint.max_keep_ckpts=100', 'log_level=WARNING'
]


def all_finite(path):
    ckpt = torch.load(path, map_location='cpu', weights_only=False)
    tensors = list(ckpt['state_dict'].values())
    for state in ckpt['optimizer']['state'].values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return all(
        torch.isfinite(t).all() for t in tensors if t.is_floating_point())


def test_on_by_default_in_every_pretraining_config():
    names = [
        os.path.relpath(p, os.path.join(ROOT, 'configs'))
        for pattern in ('moco*.py', 'mocov*/*.py')
        for p in glob.glob(os.path.join(ROOT, 'configs', pattern))
    ]
    assert len(names) >= 13  # configs/mocov2_r50_8xb32.py + mocov*/
    for name in names:
        cfg = Config.fromfile(os.path.join(ROOT, 'configs', name))
        assert cfg.default_hooks.non_finite_loss == dict(
            type='NonFiniteLossHook'), name


def test_digits_config_with_huge_lr_stops_at_the_first_nan(
        load_tool, tmp_path):
    """The issue's run: without the hook it trains on NaN and saves NaN
    checkpoints; with it (the config's default) it stops at the first NaN,
    and every checkpoint on disk is finite."""
    train = load_tool('train')
    # reference: the same run without the hook, for 1 epoch
    args = train.parse_args([
        DIGITS, '--work-dir',
        str(tmp_path / 'ref'), '--cfg-options', *DIVERGING
    ])
    cfg = train.merge_args(Config.fromfile(DIGITS), args)
    cfg.default_hooks.pop('non_finite_loss')
    cfg.custom_hooks = cfg.custom_hooks[:1]  # no kNN monitor
    cfg.train_cfg.max_epochs = 1
    cfg.experiment_name = unique_experiment_name('ref')
    ref = Runner.from_cfg(cfg)
    ref.train()
    losses = ref.message_hub.get_scalar('train/loss').data[0].tolist()
    first_bad = next(i for i, v in enumerate(losses) if not math.isfinite(v))
    assert first_bad >= 1  # diverges after some finite steps
    # today's behaviour that the hook prevents: a NaN checkpoint as latest
    assert not all_finite(tmp_path / 'ref' / f'iter_{first_bad + 1}.pth')

    work = tmp_path / 'run'
    with pytest.raises(NonFiniteLossError) as err:
        train.main(
            [DIGITS, '--work-dir',
             str(work), '--cfg-options', *DIVERGING])
    msg = str(err.value)
    it = first_bad + 1  # 1-based, as the log
    assert f'loss=nan at iteration {it} (epoch 1, batch {it}/4)' in msg
    assert (f'the last finite loss was {losses[first_bad - 1]:.6g} at '
            f'iteration {it - 1}') in msg
    assert 'lr 1e+08' in msg
    assert f'latest checkpoint is {work}/iter_{it - 1}.pth' in msg
    for advice in ('lower learning rate', 'warm-up', 'clip_grad',
                   "loss_scale='dynamic'", 'bfloat16'):
        assert advice in msg
    saved = sorted(os.listdir(work))
    assert [f for f in saved
            if f.endswith('.pth')] == [f'iter_{i}.pth' for i in range(1, it)]
    assert all(all_finite(work / f'iter_{i}.pth') for i in range(1, it))
    assert (work / 'last_checkpoint').read_text() == \
        f'{work}/iter_{it - 1}.pth'


def test_normal_run_checks_every_iteration_and_passes(tiny_moco_runner_cfg,
                                                      tmp_path):
    cfg = tiny_moco_runner_cfg(tmp_path, max_iters=3)
    cfg.default_hooks.non_finite_loss = dict(type='NonFiniteLossHook')
    runner = Runner.from_cfg(cfg)
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, NonFiniteLossHook))
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) == 3 and all(map(math.isfinite, losses))
    assert hook.last_finite_iter == 3
    assert hook.last_finite_loss == losses[-1]
    assert all_finite(tmp_path / 'iter_3.pth')


def test_iteration_loop_message_and_first_iteration(tiny_runner_cfg, tmp_path):
    """Iteration-based loop; a loss that is infinite at once."""

    @HOOKS.register_module(force=True)
    class PoisonInputs(Hook):

        def before_train_iter(self, runner, batch_idx, data_batch=None):
            data_batch['inputs'] = data_batch['inputs'] * float('inf')

    cfg = tiny_runner_cfg(tmp_path, max_iters=4)
    cfg.default_hooks.non_finite_loss = dict(type='NonFiniteLossHook')
    cfg.custom_hooks = [dict(type='PoisonInputs')]
    with pytest.raises(NonFiniteLossError) as err:
        Runner.from_cfg(cfg).train()
    msg = str(err.value)
    assert re.search(r'loss=(nan|inf) at iteration 1;', msg)
    assert 'no finite loss was logged before' in msg
    assert 'lr 0.1' in msg
    assert 'no checkpoint had been written in this run' in msg
    assert not glob.glob(str(tmp_path / '*.pth'))


def test_finite_loss_but_non_finite_weights_never_saved(
        tiny_runner_cfg, tmp_path):
    """Gradients can overflow while the loss stays finite: the weights are
    checked before every checkpoint."""

    @HOOKS.register_module(force=True)
    class PoisonWeightsAfterStep3(Hook):
        priority = 'VERY_HIGH'  # after the step, before the NaN check

        def after_train_iter(self,
                             runner,
                             batch_idx,
                             data_batch=None,
                             outputs=None):
            if runner.iter + 1 == 3:
                runner.model.linear.bias.data.fill_(float('nan'))

    cfg = tiny_runner_cfg(tmp_path, max_iters=6)  # checkpoints every 2
    cfg.default_hooks.non_finite_loss = dict(type='NonFiniteLossHook')
    cfg.custom_hooks = [dict(type='PoisonWeightsAfterStep3')]
    with pytest.raises(NonFiniteLossError) as err:
        Runner.from_cfg(cfg).train()
    msg = str(err.value)
    # iteration 3 wrote NaN weights; iteration 4's loss is NaN
    assert 'loss=nan at iteration 4;' in msg
    assert f'latest checkpoint is {tmp_path}/iter_2.pth' in msg
    assert sorted(
        os.path.basename(p)
        for p in glob.glob(str(tmp_path / '*.pth'))) == ['iter_2.pth']

    # a checkpoint due at the very iteration the weights broke
    cfg = tiny_runner_cfg(tmp_path / 'b', max_iters=6)
    cfg.default_hooks.non_finite_loss = dict(type='NonFiniteLossHook')
    cfg.default_hooks.checkpoint.interval = 3
    cfg.custom_hooks = [dict(type='PoisonWeightsAfterStep3')]
    with pytest.raises(NonFiniteLossError) as err:
        Runner.from_cfg(cfg).train()
    assert ('non-finite values after iteration 3 (linear.bias) although the '
            'logged loss was finite') in str(err.value)
    assert not glob.glob(str(tmp_path / 'b' / '*.pth'))


def test_save_outside_checkpoint_hook_is_refused(tiny_runner_cfg, tmp_path):
    cfg = tiny_runner_cfg(tmp_path, max_iters=1)
    cfg.default_hooks.non_finite_loss = dict(type='NonFiniteLossHook')
    runner = Runner.from_cfg(cfg)
    runner.train()
    runner.save_checkpoint(str(tmp_path), 'finite.pth')
    runner.model.linear.weight.data[0, 0] = float('inf')
    with pytest.raises(NonFiniteLossError, match=r'\(linear.weight\)'):
        runner.save_checkpoint(str(tmp_path), 'broken.pth')
    assert os.path.exists(tmp_path / 'finite.pth')
    assert not os.path.exists(tmp_path / 'broken.pth')


def test_non_finite_weights_at_the_end_of_an_epoch(tiny_runner_cfg, tmp_path):

    @HOOKS.register_module(force=True)
    class PoisonLastStepOfEpoch2(Hook):
        priority = 'VERY_HIGH'

        def after_train_iter(self,
                             runner,
                             batch_idx,
                             data_batch=None,
                             outputs=None):
            if runner.iter + 1 == 8:  # 4 iterations per epoch
                runner.model.linear.bias.data.fill_(float('inf'))

    cfg = tiny_runner_cfg(
        tmp_path,
        train_cfg=dict(by_epoch=True, max_epochs=3),
        param_scheduler=None)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=1)
    cfg.default_hooks.non_finite_loss = dict(type='NonFiniteLossHook')
    cfg.custom_hooks = [dict(type='PoisonLastStepOfEpoch2')]
    with pytest.raises(NonFiniteLossError) as err:
        Runner.from_cfg(cfg).train()
    assert ('non-finite values after iteration 8 (end of epoch 2) '
            '(linear.bias)') in str(err.value)
    assert 'lr 0.1' in str(err.value)
    assert f'latest checkpoint is {tmp_path}/epoch_1.pth' in str(err.value)
    assert sorted(
        os.path.basename(p)
        for p in glob.glob(str(tmp_path / '*.pth'))) == ['epoch_1.pth']
    assert all_finite(tmp_path / 'epoch_1.pth')
