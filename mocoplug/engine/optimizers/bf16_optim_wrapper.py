# Copyright (c) mocoplug contributors. All rights reserved.
from contextlib import contextmanager

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper

from mocoplug.registry import OPTIM_WRAPPERS


def check_cpu_bf16_conv(module: nn.Module, args: tuple) -> None:
    """Refuse a convolution (kernel > 1) whose input is narrower than its
    stride: oneDNN's CPU bfloat16 weight gradient reads uninitialised memory
    there (design_notes.md#precision)."""
    x = args[0] if args else None
    if not torch.is_tensor(x) or x.dim() != 4:
        return
    for size, stride, kernel in zip(x.shape[-2:], module.stride,
                                    module.kernel_size):
        if kernel > 1 and size < stride:
            raise ValueError(
                'BF16OptimWrapper: a {}x{} convolution of stride {}x{} '
                'gets a {}x{} input '.format(*module.kernel_size, *
                                             module.stride, *x.shape[-2:]) +
                '(smaller than its stride), whose CPU bfloat16 weight '
                'gradient is wrong: use a larger crop or float32.')


@OPTIM_WRAPPERS.register_module()
class BF16OptimWrapper(OptimWrapper):
    """Mixed precision with ``bfloat16`` autocast and no loss scaling, on CPU
    (where mmengine 0.10.7's ``AmpOptimWrapper`` refuses to start) or GPU;
    on CPU the first forward runs :func:`check_cpu_bf16_conv`."""

    _convs_checked = False

    @contextmanager
    def optim_context(self, model: nn.Module):
        """The context of :class:`OptimWrapper` plus bfloat16 autocast."""
        param = next(model.parameters(), None)
        device_type = param.device.type if param is not None else 'cpu'
        handles = []
        if device_type == 'cpu' and not self._convs_checked:
            handles = [
                m.register_forward_pre_hook(check_cpu_bf16_conv)
                for m in model.modules() if isinstance(m, nn.Conv2d)
            ]
        try:
            with super().optim_context(model), torch.autocast(
                    device_type=device_type, dtype=torch.bfloat16):
                yield
            self._convs_checked = True
        finally:
            for handle in handles:
                handle.remove()
