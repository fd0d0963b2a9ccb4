# Copyright (c) mocoplug contributors. All rights reserved.
"""Time one key-encoder momentum update: MomentumUpdateHook (one fused
lerp) against mmengine's ExponentialMovingAverage (mmpretrain's MoCo)."""
import copy

import torch.nn as nn
from mmengine.model import ExponentialMovingAverage
from mmpretrain.models import ResNet

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.models import MoCoProjectionNeck
from .common import machine, median_ms, parser, print_rows


class Pair(nn.Module):
    """An online encoder and its momentum copy, as MoCo declares them."""

    def __init__(self, depth: int):
        super().__init__()
        self.online = nn.Sequential(
            ResNet(depth=depth),
            MoCoProjectionNeck(2048 if depth >= 50 else 512, 2048, 128))
        self.target = copy.deepcopy(self.online).requires_grad_(False)

    def momentum_pairs(self):
        return [(self.online, self.target)]


def main(argv=None) -> tuple:
    p = parser(__doc__, 'momentum-update', out=None, depth=50, repeats=20)
    args = p.parse_args(argv)
    pair = Pair(args.depth).to(args.device)
    hook = MomentumUpdateHook(momentum=0.999)
    hook.attach(pair)
    ours = median_ms(lambda: hook.update(0.999), args.device, args.repeats)
    ema = ExponentialMovingAverage(pair.online, momentum=0.001).to(args.device)
    ema.update_parameters(pair.online)  # the first call only copies
    theirs = median_ms(lambda: ema.update_parameters(pair.online), args.device,
                       args.repeats)
    params = list(pair.online.parameters())
    print(f'momentum update of ResNet-{args.depth} + MoCo v2 neck '
          f'({sum(p.numel() for p in params) / 1e6:.1f}M parameters in '
          f'{len(params)} tensors) on {machine(args.device)}:')
    print_rows({
        'mocoplug MomentumUpdateHook (foreach lerp)': f'{ours:.2f}',
        'mmengine ExponentialMovingAverage (loop)': f'{theirs:.2f}',
        'speed-up': f'{theirs / ours:.1f}x'
    })
    return ours, theirs
