# Copyright (c) mocoplug contributors. All rights reserved.
"""Cost of NonFiniteLossHook per training iteration of the digits demo."""
import tempfile
import time

import numpy as np
import torch

from mocoplug.engine.hooks import NonFiniteLossHook
from .common import DIGITS, hook_runner, parser, print_rows


def main(argv=None) -> dict:
    args = parser(
        __doc__,
        'non-finite-check',
        device=False,
        out=None,
        iters=10,
        calls=20000).parse_args(argv)
    with tempfile.TemporaryDirectory() as work_dir:
        runner, hook = hook_runner(DIGITS, work_dir, NonFiniteLossHook,
                                   args.iters)
        runner.train()
        # IterTimerHook's time of each iteration; the first holds start-up
        per_iter = float(
            np.median(runner.message_hub.get_scalar('train/time').data[0][1:]))
        # the model's log_vars: device tensors, as train_step returns them
        outputs = dict(loss=torch.tensor(8.3), contrast_acc=torch.tensor(2.))
        for key, value in outputs.items():
            runner.message_hub.update_scalar(f'train/{key}', value)
        runner.train_loop._iter = 0  # no checkpoint is due
        start = time.perf_counter()
        for _ in range(args.calls):
            hook.after_train_iter(runner, 0, None, outputs)
        per_call = (time.perf_counter() - start) / args.calls
    call = f'NonFiniteLossHook.after_train_iter (mean of {args.calls} calls)'
    iteration = ('one training iteration of the digits config (batch 64, CPU;'
                 f' median of iterations 2-{args.iters})')
    print_rows(
        {
            call: f'{per_call * 1e6:.1f} us',
            iteration: f'{per_iter * 1e3:.1f} ms',
            'overhead': f'{100 * per_call / per_iter:.4f}% of an iteration',
        },
        value='time')
    return dict(call_s=per_call, iteration_s=per_iter)
