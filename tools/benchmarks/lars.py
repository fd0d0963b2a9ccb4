# Copyright (c) mocoplug contributors. All rights reserved.
"""Time one LARS step on MoCo v3 R50: mocoplug's MoCoV3LARS (per tensor,
foreach) against mmpretrain's LARS; on a GPU also its host syncs."""
import statistics
import warnings
from functools import partial
from typing import Callable, List

import torch
import torch.nn as nn
from mmpretrain.engine.optimizers import LARS
from mmpretrain.models import ResNet

from mocoplug.engine.optimizers import MoCoV3LARS
from mocoplug.models import MoCoProjectionNeck
from .common import machine, parser, round_robin_ms

HYPER = dict(lr=9.6, momentum=0.9, weight_decay=1e-6)  # configs/mocov3 R50


def params_with_grads(device: str) -> List[nn.Parameter]:
    """MoCo v3 R50's optimised parameters, each with a random gradient."""
    torch.manual_seed(0)
    mlp = dict(hid_channels=4096, out_channels=256, with_bias=False)
    model = nn.ModuleList([
        ResNet(depth=50),
        MoCoProjectionNeck(
            2048,
            **mlp,
            with_bn=True,
            with_last_bn=True,
            with_last_bn_affine=False),
        MoCoProjectionNeck(
            256, **mlp, with_bn=True, with_last_bn=False, with_avg_pool=False)
    ])
    params = list(model.to(device).parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return params


def mmpretrain_lars(params) -> torch.optim.Optimizer:
    """mmpretrain's LARS, 1-D parameters excluded (as its constructor)."""
    flat = [p for p in params if p.ndim <= 1]
    return LARS([
        dict(params=[p for p in params if p.ndim > 1]),
        dict(params=flat, weight_decay=0., lars_exclude=True)
    ], **HYPER)


def host_syncs(fn: Callable) -> int:
    """The host syncs of fn() that torch's CUDA sync debug mode reports."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode('default')
    return sum('synchroniz' in str(w.message) for w in caught)


IMPLEMENTATIONS = {
    'mocoplug MoCoV3LARS, per tensor':
    partial(MoCoV3LARS, foreach=False, **HYPER),
    'mocoplug MoCoV3LARS, foreach': partial(MoCoV3LARS, foreach=True, **HYPER),
    "mmpretrain's LARS": mmpretrain_lars,
}


def main(argv=None):
    args = parser(__doc__, 'lars', out=None, repeats=20).parse_args(argv)
    optimizers = {
        name: build(params_with_grads(args.device))
        for name, build in IMPLEMENTATIONS.items()
    }
    steps = {name: opt.step for name, opt in optimizers.items()}
    times = round_robin_ms(steps, args.device, args.repeats)
    results = {}
    for name, opt in optimizers.items():
        syncs = host_syncs(opt.step) if args.device == 'cuda' else None
        results[name] = statistics.median(times[name]), syncs
    groups = optimizers["mmpretrain's LARS"].param_groups
    params = [p for group in groups for p in group['params']]
    n = sum(p.numel() for p in params)
    adapted = sum(p.ndim > 1 for p in params)
    print(f'one LARS step on MoCo v3 R50 + projector + predictor '
          f'({n / 1e6:.1f}M parameters in {len(params)} tensors, '
          f'{adapted} adapted) on {machine(args.device)}, torch '
          f'{torch.__version__}:')
    base = results["mmpretrain's LARS"][0]
    print(f'  {"implementation":34s} {"ms/step":>9s} {"vs mmpretrain":>14s}'
          f' {"host syncs":>11s}')
    for name, (ms, syncs) in results.items():
        shown = 'n/a (CPU)' if syncs is None else str(syncs)
        print(f'  {name:34s} {ms:9.2f} {base / ms:13.2f}x {shown:>11s}')
    return results
