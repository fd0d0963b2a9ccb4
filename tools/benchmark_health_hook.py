# Copyright (c) mocoplug contributors. All rights reserved.
"""Cost of RepresentationHealthHook on a config (default: the digits demo).

Times, on real batches of the config's model: a training step, the hook's
work on a checked iteration (measure + message hub + collapse check, the
stash included) and on an unchecked one (its two hook calls), and prints
them in ms (median of the repeats).

    python tools/benchmark_health_hook.py
    python tools/benchmark_health_hook.py CONFIG --steps 20
"""
import argparse
import statistics
import tempfile
import time

import torch
from mmengine.config import Config
from mmengine.runner import Runner

import mocoplug  # noqa: F401
from mocoplug.engine.hooks import RepresentationHealthHook

DIGITS = ('configs/mocov2/'
          'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
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


def median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.work_dir = tempfile.mkdtemp()
    cfg.log_level = 'WARNING'
    cfg.custom_hooks = [
        h for h in cfg.get('custom_hooks', []) if h['type'] != 'KNNMonitorHook'
    ]
    runner = Runner.from_cfg(cfg)
    hook = next(
        h for h in runner.hooks if isinstance(h, RepresentationHealthHook))
    runner.train_loop  # builds the loop and the dataloader
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    hook.before_train(runner)
    model = runner.model
    model.momentum_hook_attached = True  # no momentum update timed here
    model.train()
    batches = iter(runner.train_dataloader)
    batch = next(batches)

    def step(stash: bool):
        model.stash_embeddings = stash
        model.train_step(batch, runner.optim_wrapper)

    for _ in range(2):  # warm-up
        step(True)
    step_times = {False: [], True: []}
    for _ in range(args.steps):  # alternate, so load drifts hit both
        for stash in (False, True):
            start = time.perf_counter()
            step(stash)
            step_times[stash].append(time.perf_counter() - start)

    check_idx = hook.interval - 1  # an iteration the hook checks
    assert hook.is_check_iter(runner, check_idx)

    def checked():
        hook._checking = True
        model.stash_embeddings = True
        model.stashed_embeddings = stash
        hook.after_train_iter(runner, check_idx)

    step(True)
    stash = model.stashed_embeddings
    check = median_ms(checked, args.steps * 3)

    def unchecked():
        hook.before_train_iter(runner, 0)
        hook.after_train_iter(runner, 0)

    assert not hook.is_check_iter(runner, 0)
    idle = median_ms(unchecked, args.calls)
    train = 1000 * statistics.median(step_times[False])
    train_stash = 1000 * statistics.median(step_times[True])
    print(f'config: {args.config}')
    print(f'threads: {torch.get_num_threads()}, check every '
          f'{hook.interval} iterations')
    print('| what | ms |\n|---|---|')
    print(f'| training step (no stash) | {train:.1f} |')
    print(f'| training step with stash | {train_stash:.1f} |')
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
