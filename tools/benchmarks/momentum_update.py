# Copyright (c) mocoplug contributors. All rights reserved.
"""Time one key-encoder momentum update: mocoplug's MomentumUpdateHook (one
fused torch._foreach_lerp_) against mmengine's ExponentialMovingAverage as
mmpretrain's MoCo uses it (a Python loop over parameters, plus a copy of
every buffer).

    python tools/benchmarks/benchmark.py momentum-update [--depth 50] \\
        [--device cuda]
"""
import argparse
import copy

import torch
import torch.nn as nn
from mmengine.model import ExponentialMovingAverage
from mmpretrain.models import ResNet

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.models import MoCoProjectionNeck
from .common import machine, median_ms


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


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='benchmark.py momentum-update',
        description=__doc__.split('\n')[0])
    parser.add_argument('--depth', type=int, default=50)
    parser.add_argument(
        '--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--repeats', type=int, default=20)
    args = parser.parse_args(argv)

    pair = Pair(args.depth).to(args.device)
    hook = MomentumUpdateHook(momentum=0.999)
    hook.attach(pair)
    ours = median_ms(lambda: hook.update(0.999), args.device, args.repeats)

    ema = ExponentialMovingAverage(pair.online, momentum=0.001).to(args.device)
    ema.update_parameters(pair.online)  # the first call only copies
    theirs = median_ms(lambda: ema.update_parameters(pair.online), args.device,
                       args.repeats)

    n = sum(p.numel() for p in pair.online.parameters())
    tensors = len(list(pair.online.parameters()))
    name = machine(args.device)
    print(f'momentum update of ResNet-{args.depth} + MoCo v2 neck '
          f'({n / 1e6:.1f}M parameters in {tensors} tensors) on {name}:')
    print(f'  mocoplug MomentumUpdateHook (foreach lerp): {ours:8.2f} ms')
    print(f'  mmengine ExponentialMovingAverage (loop):   {theirs:8.2f} ms')
    print(f'  speed-up: {theirs / ours:.1f}x')
    return ours, theirs


if __name__ == '__main__':
    main()
