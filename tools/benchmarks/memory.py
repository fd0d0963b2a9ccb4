# Copyright (c) mocoplug contributors. All rights reserved.
"""Check that host memory stays flat during training: RSS after every
iteration of a config, a line fitted after ``--warmup`` (FLAT: <= 1 MiB per
100 iterations)."""
import math
import os
import os.path as osp
import runpy
import tempfile
import time
from contextlib import suppress

import numpy as np
from mmengine.config import Config, DictAction
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS

from .common import DIGITS, ROOT, load_average, parser, rss_bytes, write_json

MIB = 1024 * 1024
MAX_SLOPE = 1.0  # MiB per 100 iterations


def total_rss() -> int:
    """RSS of this process plus its children (over-counts shared pages)."""
    pid, total = os.getpid(), rss_bytes()
    path = f'/proc/{pid}/task/{pid}/children'
    for child in open(path).read().split() if osp.exists(path) else []:
        with suppress(FileNotFoundError, ProcessLookupError):
            total += rss_bytes(child)
    return total


class RSSRecorder(Hook):
    """Records (iteration, RSS) per iteration; stops at ``max_iters``."""

    priority = 'LOWEST'

    def __init__(self, max_iters: int) -> None:
        self.max_iters, self.samples = max_iters, []

    def before_train(self, runner) -> None:
        self.start_rss = total_rss()

    def after_train_iter(self, runner, batch_idx, **kwargs) -> None:
        self.samples.append((runner.iter + 1, total_rss()))
        if runner.iter + 1 >= self.max_iters:
            runner.train_loop.stop_training = True


def main(argv=None) -> float:
    p = parser(
        __doc__, 'memory', device=False, out=None, iters=500, warmup=100)
    p.add_argument('config', nargs='?', default=DIGITS)
    p.add_argument('--cfg-options', nargs='+', action=DictAction)
    args = p.parse_args(argv)
    work_dir = tempfile.mkdtemp(prefix='benchmark_memory_')
    tool = runpy.run_path(osp.join(ROOT, 'tools', 'train.py'))
    train_args = tool['parse_args']([args.config, '--work-dir', work_dir])
    cfg = tool['merge_args'](Config.fromfile(args.config), train_args)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg.log_level = 'WARNING'
    runner = RUNNERS.build(cfg)
    loop = runner.train_loop
    if cfg.train_cfg.get('max_epochs') is not None:  # enough epochs
        per_epoch = len(runner.train_dataloader)
        loop._max_epochs = max(loop.max_epochs,
                               math.ceil(args.iters / per_epoch))
        loop._max_iters = loop._max_epochs * per_epoch
    recorder = RSSRecorder(args.iters)
    runner.register_hook(recorder)
    start = time.perf_counter()
    runner.train()
    seconds = time.perf_counter() - start
    samples = recorder.samples
    by_iter = dict(samples)
    warm = min(by_iter, key=lambda i: abs(i - args.warmup))
    after = np.array([(i, r) for i, r in samples if i > args.warmup],
                     dtype=np.float64).reshape(-1, 2)
    if len(after) < 2:
        raise ValueError(f'--warmup {args.warmup} leaves fewer than 2 samples')
    slope = float(np.polyfit(after[:, 0], after[:, 1] / MIB, 1)[0] * 100)
    last = samples[-1][0]
    print(f'config: {osp.relpath(args.config)}')
    print(f'iterations: {last} in {seconds:.0f} s ({os.cpu_count()} CPUs, '
          f'load average {" / ".join(f"{x:.1f}" for x in load_average())})')
    print(f'RSS before training: {recorder.start_rss / MIB:.1f} MiB')
    print(f'RSS after iteration 1: {samples[0][1] / MIB:.1f} MiB')
    print(f'RSS after iteration {warm} (end of warm-up): '
          f'{by_iter[warm] / MIB:.1f} MiB')
    print(f'RSS at the end (iteration {last}): {samples[-1][1] / MIB:.1f} '
          f'MiB; peak {max(r for _, r in samples) / MIB:.1f} MiB')
    print(f'slope after warm-up: {slope:+.3f} MiB per 100 iterations '
          '(least squares)')
    marks = sorted(set(range(0, last + 1, 100)) & set(by_iter) | {last})
    print('RSS by iteration (MiB): ' + ', '.join(f'{i}: {by_iter[i] / MIB:.1f}'
                                                 for i in marks))
    write_json(
        dict(start=recorder.start_rss, samples=samples),
        osp.join(work_dir, 'rss.json'))  # per-iteration RSS
    print(f"verdict: {'FLAT' if slope <= MAX_SLOPE else 'GROWING'} "
          f'(threshold {MAX_SLOPE} MiB per 100 iterations)')
    return slope
