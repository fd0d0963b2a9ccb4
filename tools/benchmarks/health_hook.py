# Copyright (c) mocoplug contributors. All rights reserved.
"""Cost of RepresentationHealthHook per iteration on a config (default:
the digits demo), checked and unchecked, medians in ms."""
import os.path as osp
import statistics
import tempfile

import torch

from mocoplug.engine.hooks import MomentumUpdateHook, RepresentationHealthHook
from .common import (DIGITS, hook_runner, median_ms, parser, print_rows,
                     round_robin_ms)


def main(argv=None) -> dict:
    p = parser(
        __doc__, 'health-hook', device=False, out=None, steps=10, calls=10000)
    p.add_argument('config', nargs='?', default=DIGITS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work_dir:
        runner, hook = hook_runner(args.config, work_dir,
                                   RepresentationHealthHook)
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
            model.train_step(batch, runner.optim_wrapper)
            momentum.update(0.99)

        steps = round_robin_ms({c: lambda c=c: step(c)
                                for c in (False, True)},
                               repeats=args.steps,
                               warmup=2)
        step(True)
        observed = hook._observed  # what the step's forward hook kept

        def checked():
            hook._checking, hook._observed = True, observed
            hook.after_train_iter(runner, check_idx)

        def unchecked():
            hook.before_train_iter(runner, 0)
            hook.after_train_iter(runner, 0)

        check = median_ms(checked, repeats=args.steps * 3, warmup=0)
        idle = median_ms(unchecked, repeats=args.calls, warmup=0)
    result = dict(
        train_ms=statistics.median(steps[False]),
        train_stash_ms=statistics.median(steps[True]),
        check_ms=check,
        idle_ms=idle,
        interval=hook.interval)
    print(f'config: {osp.relpath(args.config)}')
    print(f'threads: {torch.get_num_threads()}, check every '
          f'{hook.interval} iterations')
    amortised = (check + (hook.interval - 1) * idle) / hook.interval
    print_rows({
        'training step (unchecked)': f"{result['train_ms']:.1f}",
        'training step (checked: embeddings kept)':
        f"{result['train_stash_ms']:.1f}",
        'hook work on a checked iteration': f'{check:.2f}',
        'hook work on an unchecked iteration': f'{idle * 1000:.2f} us',
        'amortised per iteration': f'{amortised:.3f}',
    })
    return result
