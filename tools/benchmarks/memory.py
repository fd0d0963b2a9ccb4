# Copyright (c) mocoplug contributors. All rights reserved.
"""Check that host memory stays flat during training.

Trains a config (by default the digits demo, on CPU, built as
tools/train.py builds it: its hooks, kNN monitor and checkpoints included)
for about ``--iters`` iterations, records the resident set size (RSS) of the
process, and its dataloader workers, after every iteration, and fits a line
to the RSS after ``--warmup`` iterations (allocator pools, caches and the
first checkpoint fill up first). Prints the figures and a verdict: FLAT when
the slope is at most ``--max-slope`` MiB per 100 iterations.

    python tools/benchmarks/benchmark.py memory           # digits, 500 iters
    python tools/benchmarks/benchmark.py memory --iters 1000 --warmup 200 \\
        --cfg-options train_dataloader.num_workers=2
"""
import argparse
import json
import math
import os
import os.path as osp
import tempfile
import time
from typing import List, Optional, Tuple

import numpy as np
from mmengine.config import Config, DictAction
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS

from .common import CONFIGS, ROOT, load_average, rss_bytes, tool_module

DIGITS = osp.join(
    CONFIGS, 'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
MIB = 1024 * 1024


def children(pid: int) -> List[int]:
    """Direct child processes (dataloader workers)."""
    path = f'/proc/{pid}/task/{pid}/children'
    if not osp.exists(path):
        return []
    with open(path) as f:
        return [int(p) for p in f.read().split()]


def total_rss() -> int:
    """RSS of this process plus its children (workers share pages with the
    parent, so this over-counts; it is the trend that matters)."""
    pid = os.getpid()
    total = rss_bytes(pid)
    for child in children(pid):
        try:
            total += rss_bytes(child)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


class RSSRecorder(Hook):
    """Records (iteration, RSS) after every training iteration and stops
    training at the end of the epoch that reaches ``max_iters``."""

    priority = 'LOWEST'

    def __init__(self, max_iters: int) -> None:
        self.max_iters = max_iters
        self.samples: List[Tuple[int, int]] = []
        self.start_rss: Optional[int] = None

    def before_train(self, runner) -> None:
        self.start_rss = total_rss()

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None) -> None:
        self.samples.append((runner.iter + 1, total_rss()))
        if runner.iter + 1 >= self.max_iters:
            runner.train_loop.stop_training = True


def slope_per_100(samples: List[Tuple[int, int]], warmup: int) -> float:
    """Least-squares slope of RSS after ``warmup`` iterations, in MiB per
    100 iterations."""
    its = np.array([i for i, _ in samples if i > warmup], dtype=np.float64)
    rss = np.array([r for i, r in samples if i > warmup], dtype=np.float64)
    if len(its) < 2:
        raise ValueError(f'--warmup {warmup} leaves fewer than 2 samples')
    return float(np.polyfit(its, rss / MIB, 1)[0] * 100)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(
        prog='benchmark.py memory', description=__doc__.split('\n')[0])
    parser.add_argument('config', nargs='?', default=DIGITS)
    parser.add_argument('--iters', type=int, default=500)
    parser.add_argument('--warmup', type=int, default=100)
    parser.add_argument(
        '--max-slope',
        type=float,
        default=1.0,
        help='verdict threshold, MiB per 100 iterations')
    parser.add_argument('--work-dir', help='default: a temporary folder')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    args = parser.parse_args(argv)

    work_dir = args.work_dir or tempfile.mkdtemp(prefix='benchmark_memory_')
    train_argv = [args.config, '--work-dir', work_dir]
    train_tool = tool_module('train')  # tools/train.py's config merging
    cfg = train_tool.merge_args(
        Config.fromfile(args.config), train_tool.parse_args(train_argv))
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg.log_level = 'WARNING'
    runner = RUNNERS.build(cfg)
    if cfg.train_cfg.get('max_epochs') is not None:  # enough epochs
        per_epoch = len(runner.train_dataloader)
        runner.train_loop._max_epochs = max(runner.train_loop.max_epochs,
                                            math.ceil(args.iters / per_epoch))
        runner.train_loop._max_iters = runner.train_loop._max_epochs * \
            per_epoch
    recorder = RSSRecorder(args.iters)
    runner.register_hook(recorder)
    start = time.perf_counter()
    runner.train()
    seconds = time.perf_counter() - start

    samples = recorder.samples
    by_iter = dict(samples)
    warm = min(by_iter, key=lambda i: abs(i - args.warmup))
    slope = slope_per_100(samples, args.warmup)
    print(f'config: {osp.relpath(args.config, ROOT)}')
    print(f'iterations: {samples[-1][0]} in {seconds:.0f} s '
          f'({os.cpu_count()} CPUs, load average '
          f'{" / ".join(f"{x:.1f}" for x in load_average())})')
    print(f'RSS before training: {recorder.start_rss / MIB:.1f} MiB')
    print(f'RSS after iteration 1: {samples[0][1] / MIB:.1f} MiB')
    print(f'RSS after iteration {warm} (end of warm-up): '
          f'{by_iter[warm] / MIB:.1f} MiB')
    print(f'RSS at the end (iteration {samples[-1][0]}): '
          f'{samples[-1][1] / MIB:.1f} MiB; peak '
          f'{max(r for _, r in samples) / MIB:.1f} MiB')
    print(f'slope after warm-up: {slope:+.3f} MiB per 100 iterations '
          '(least squares)')
    marks = sorted({i
                    for i in range(0, samples[-1][0] + 1, 100)} & set(by_iter)
                   | {samples[-1][0]})
    print('RSS by iteration (MiB): ' + ', '.join(f'{i}: {by_iter[i] / MIB:.1f}'
                                                 for i in marks))
    with open(osp.join(work_dir, 'rss.json'), 'w') as f:
        json.dump(dict(start=recorder.start_rss, samples=samples), f)
    print(f'per-iteration RSS: {osp.join(work_dir, "rss.json")}')
    verdict = 'FLAT' if slope <= args.max_slope else 'GROWING'
    print(f'verdict: {verdict} (threshold {args.max_slope} MiB per 100 '
          'iterations)')
    return slope


if __name__ == '__main__':
    main()
