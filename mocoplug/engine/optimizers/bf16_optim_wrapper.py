# Copyright (c) mocoplug contributors. All rights reserved.
from contextlib import contextmanager

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper

from mocoplug.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class BF16OptimWrapper(OptimWrapper):
    """Mixed precision with ``bfloat16`` autocast, on CPU or GPU.

    mmengine 0.10.7's ``AmpOptimWrapper`` refuses to start without a GPU
    (an assertion in its constructor), so ``tools/train.py --amp`` uses this
    wrapper on CPU. bfloat16 has the exponent range of float32, so no loss
    scaling is needed: backward and step are those of ``OptimWrapper``.
    The forward runs under ``torch.autocast(dtype=torch.bfloat16)`` on the
    device of the model's parameters. MoCo's queue, similarities and loss
    stay float32 (see ``NegativeKeyQueue`` and ``fused_info_nce``).
    """

    @contextmanager
    def optim_context(self, model: nn.Module):
        """The context of :class:`OptimWrapper` plus bfloat16 autocast."""
        param = next(model.parameters(), None)
        device_type = param.device.type if param is not None else 'cpu'
        with super().optim_context(model), torch.autocast(
                device_type=device_type, dtype=torch.bfloat16):
            yield
