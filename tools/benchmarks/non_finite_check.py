# Copyright (c) mocoplug contributors. All rights reserved.
"""Measure what NonFiniteLossHook costs per training iteration.

Builds the digits demo config's Runner (the real hooks and message hub),
trains ``--iters`` iterations to fill the message hub, then times the
hook's per-iteration work (``after_train_iter`` with the model's real
outputs) against one training iteration of the same model::

    python tools/benchmarks/benchmark.py non-finite-check [--iters 10] \\
        [--calls 20000]
"""
import argparse
import os.path as osp
import tempfile
import time

import numpy as np
import torch
from mmengine.config import Config
from mmengine.registry import RUNNERS

import mocoplug  # noqa: F401
from mocoplug.engine.hooks import NonFiniteLossHook
from .common import CONFIGS

DIGITS = osp.join(
    CONFIGS, 'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog='benchmark.py non-finite-check',
        description=__doc__.split('\n')[0])
    parser.add_argument('--iters', type=int, default=10)
    parser.add_argument('--calls', type=int, default=20000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work_dir:
        cfg = Config.fromfile(DIGITS)
        cfg.work_dir = work_dir
        cfg.log_level = 'WARNING'
        cfg.custom_hooks = cfg.custom_hooks[:1]  # no kNN monitor
        cfg.default_hooks.checkpoint = None
        cfg.train_cfg = dict(by_epoch=False, max_iters=args.iters)
        cfg.param_scheduler = None
        runner = RUNNERS.build(cfg)
        runner.train()
        # IterTimerHook's time of each iteration; the first holds start-up
        per_iter = float(
            np.median(runner.message_hub.get_scalar('train/time').data[0][1:]))
        hook = next(
            h for h in runner.hooks if isinstance(h, NonFiniteLossHook))
        # the model's real log_vars: device tensors, as train_step returns
        outputs = dict(loss=torch.tensor(8.3), contrast_acc=torch.tensor(2.))
        for key, value in outputs.items():
            runner.message_hub.update_scalar(f'train/{key}', value)
        runner.train_loop._iter = 0  # no checkpoint is due (none is set)
        start = time.perf_counter()
        for _ in range(args.calls):
            hook.after_train_iter(runner, 0, None, outputs)
        per_call = (time.perf_counter() - start) / args.calls
    print(f'NonFiniteLossHook.after_train_iter: {per_call * 1e6:.1f} us per '
          f'call (mean of {args.calls})')
    print(f'one training iteration of the digits config (batch 64, CPU): '
          f'{per_iter * 1e3:.1f} ms (median of iterations 2-{args.iters})')
    print(f'overhead: {100 * per_call / per_iter:.4f}% of an iteration')


if __name__ == '__main__':
    main()
