# Copyright (c) mocoplug contributors. All rights reserved.
"""Cost of RepresentationHealthHook on a config (default: the digits demo).

Times, on real batches of the config's model: a training step, the hook's
work on a checked iteration (measure + message hub + collapse check; the
observation inside the step is in the step with check) and on an unchecked
one (its two hook calls), and prints
them in ms (median of the repeats).

    python tools/benchmarks/benchmark.py health-hook
    python tools/benchmarks/benchmark.py health-hook CONFIG --steps 20
"""
import argparse
import statistics
import tempfile
from functools import partial

import torch
from mmengine.config import Config
from mmengine.registry import RUNNERS

import mocoplug  # noqa: F401
from mocoplug.engine.hooks import MomentumUpdateHook, RepresentationHealthHook
from .common import median_ms, round_robin_ms

DIGITS = ('configs/mocov2/'
          'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='benchmark.py health-hook', description=__doc__.split('\n')[0])
    parser.add_argument('config', nargs='?', default=DIGITS)
    parser.add_argument(
        '--steps',
        type=int,
        default=10,
        help='training steps timed (and checks)')
    parser.add_argument(
        '--calls',
        type=int,
        default=10000,
        help='unchecked-iteration hook calls timed')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.work_dir = tempfile.mkdtemp()
    cfg.log_level = 'WARNING'
    cfg.custom_hooks = [
        h for h in cfg.get('custom_hooks', []) if h['type'] != 'KNNMonitorHook'
    ]
    runner = RUNNERS.build(cfg)
    hook = next(
        h for h in runner.hooks if isinstance(h, RepresentationHealthHook))
    runner.train_loop  # builds the loop and the dataloader
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    hook.before_train(runner)
    model = runner.model
    model.train()
    momentum = MomentumUpdateHook(momentum=0.99)  # the same in both steps
    momentum.attach(model)
    batches = iter(runner.train_dataloader)
    batch = next(batches)
    check_idx = hook.interval - 1  # an iteration the hook checks
    assert hook.is_check_iter(runner, check_idx)

    def step(check: bool):
        hook.before_train_iter(runner, check_idx if check else 0)
        model.train_step(batch, runner.optim_wrapper)
        momentum.update(0.99)

    # alternate, so load drifts hit both
    step_times = round_robin_ms(
        {
            False: partial(step, False),
            True: partial(step, True)
        },
        repeats=args.steps,
        warmup=2)

    step(True)
    observed = hook._observed  # what the step's forward hook kept

    def checked():
        hook._checking, hook._observed = True, observed
        hook.after_train_iter(runner, check_idx)

    check = median_ms(checked, repeats=args.steps * 3, warmup=0)

    def unchecked():
        hook.before_train_iter(runner, 0)
        hook.after_train_iter(runner, 0)

    assert not hook.is_check_iter(runner, 0)
    idle = median_ms(unchecked, repeats=args.calls, warmup=0)
    train = statistics.median(step_times[False])
    train_stash = statistics.median(step_times[True])
    print(f'config: {args.config}')
    print(f'threads: {torch.get_num_threads()}, check every '
          f'{hook.interval} iterations')
    print('| what | ms |\n|---|---|')
    print(f'| training step (unchecked) | {train:.1f} |')
    print(f'| training step (checked: embeddings kept) | {train_stash:.1f} |')
    print(f'| hook work on a checked iteration | {check:.2f} |')
    print(f'| hook work on an unchecked iteration | {idle * 1000:.2f} us |')
    print(f'| amortised per iteration | '
          f'{(check + (hook.interval - 1) * idle) / hook.interval:.3f} |')
    return dict(
        train_ms=train,
        train_stash_ms=train_stash,
        check_ms=check,
        idle_ms=idle,
        interval=hook.interval)


if __name__ == '__main__':
    main()
