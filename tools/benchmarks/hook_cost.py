# Copyright (c) mocoplug contributors. All rights reserved.
"""Cost per iteration of RepresentationHealthHook (checked and unchecked)
and NonFiniteLossHook on a config (default: the digits demo), medians."""
import os.path as osp
import statistics
import tempfile

import torch
from mmengine.registry import RUNNERS

from mocoplug.engine.hooks import (MomentumUpdateHook, NonFiniteLossHook,
                                   RepresentationHealthHook)
from .common import (DIGITS, median_ms, parser, print_rows, quiet_cfg,
                     round_robin_ms)


def main(argv=None) -> dict:
    p = parser(
        __doc__, 'hook-cost', device=False, out=None, steps=10, calls=10000)
    p.add_argument('config', nargs='?', default=DIGITS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work_dir:
        runner = RUNNERS.build(quiet_cfg(args.config, work_dir))
        hook = next(
            h for h in runner.hooks if isinstance(h, RepresentationHealthHook))
        runner.train_loop  # builds the loop and the dataloader
        runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
        hook.before_train(runner)
        model = runner.model.train()
        momentum = MomentumUpdateHook(momentum=0.99)  # the same in both
        momentum.attach(model)
        batch = next(iter(runner.train_dataloader))
        check_idx = hook.interval - 1  # an iteration the hook checks
        assert hook.is_check_iter(runner, check_idx)
        assert not hook.is_check_iter(runner, 0)

        def step(check: bool):
            hook.before_train_iter(runner, check_idx if check else 0)
            outputs = model.train_step(batch, runner.optim_wrapper)
            momentum.update(0.99)
            return outputs

        steps = round_robin_ms({c: lambda c=c: step(c)
                                for c in (False, True)}, 'cpu', args.steps, 2)
        outputs = step(True)  # device tensors, as train_step returns them
        observed = hook._observed  # what the step's forward hook kept

        def checked():
            hook._checking, hook._observed = True, observed
            hook.after_train_iter(runner, check_idx)

        def unchecked():
            hook.before_train_iter(runner, 0)
            hook.after_train_iter(runner, 0)

        check = median_ms(checked, repeats=args.steps * 3, warmup=0)
        idle = median_ms(unchecked, repeats=args.calls, warmup=0)
        guard, = [h for h in runner.hooks if isinstance(h, NonFiniteLossHook)]
        for key, value in outputs.items():
            runner.message_hub.update_scalar(f'train/{key}', value)
        non_finite = median_ms(  # iteration 0: no checkpoint is due
            lambda: guard.after_train_iter(runner, 0, None, outputs), 'cpu',
            args.calls, 0)
    train, stash = (statistics.median(steps[c]) for c in (False, True))
    amortised = (check + (hook.interval - 1) * idle) / hook.interval
    print(f'config: {osp.relpath(args.config)}, {torch.get_num_threads()} '
          f'threads, a health check every {hook.interval} iterations')
    rows = {
        'step, unchecked': f'{train:.1f}',
        'step, checked (embeddings kept)': f'{stash:.1f}',
        'health hook, checked iteration': f'{check:.2f}',
        'health hook, unchecked iteration': f'{idle * 1000:.2f} us',
        'health hook, amortised per iteration': f'{amortised:.3f}',
        'NonFiniteLossHook, per iteration': f'{non_finite * 1000:.2f} us',
    }
    print_rows(rows)
    return rows
