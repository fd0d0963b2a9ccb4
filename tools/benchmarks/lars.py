# Copyright (c) mocoplug contributors. All rights reserved.
"""Time one LARS step on the parameters of MoCo v3's ResNet-50 (backbone,
projector, predictor): mocoplug's MoCoV3LARS one tensor at a time and with
multi-tensor (torch._foreach_*) kernels, against mmpretrain's LARS (a Python
loop calling .item() twice per adapted parameter). On a GPU it also counts
the host synchronisations of one step (torch.cuda.set_sync_debug_mode).

    python tools/benchmarks/benchmark.py lars [--device cuda] [--repeats 20]
"""
import argparse
import statistics
import warnings
from typing import Callable, List

import torch
import torch.nn as nn
from mmpretrain.engine.optimizers import LARS
from mmpretrain.models import ResNet

from mocoplug.engine.optimizers import MoCoV3LARS
from mocoplug.models import MoCoProjectionNeck
from .common import machine, round_robin_ms

# configs/mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py
LR, MOMENTUM, WEIGHT_DECAY = 9.6, 0.9, 1e-6


def mocov3_r50() -> nn.Module:
    """The trained modules of MoCo v3 R50 (the momentum encoder, frozen,
    is not in the optimizer)."""
    return nn.ModuleDict(
        dict(
            backbone=ResNet(depth=50),
            neck=MoCoProjectionNeck(
                2048,
                4096,
                256,
                with_bias=False,
                with_bn=True,
                with_last_bn=True,
                with_last_bn_affine=False),
            predictor=MoCoProjectionNeck(
                256,
                4096,
                256,
                with_bias=False,
                with_bn=True,
                with_last_bn=False,
                with_avg_pool=False)))


def params_with_grads(device: str) -> List[nn.Parameter]:
    """The parameters, each with a fixed random gradient."""
    torch.manual_seed(0)
    params = list(mocov3_r50().to(device).parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return params


def ours(params, foreach: bool) -> torch.optim.Optimizer:
    return MoCoV3LARS(
        params,
        lr=LR,
        momentum=MOMENTUM,
        weight_decay=WEIGHT_DECAY,
        foreach=foreach)


def mmpretrain_lars(params) -> torch.optim.Optimizer:
    """mmpretrain's LARS with the 1-D parameters excluded, as
    LARSOptimWrapperConstructor sets it up."""
    return LARS([
        dict(params=[p for p in params if p.ndim > 1]),
        dict(
            params=[p for p in params if p.ndim <= 1],
            weight_decay=0.,
            lars_exclude=True)
    ],
                lr=LR,
                momentum=MOMENTUM,
                weight_decay=WEIGHT_DECAY)


def host_syncs(fn: Callable) -> int:
    """The synchronisations of fn() that torch's CUDA sync debug mode
    reports (one warning each)."""
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
    'mocoplug MoCoV3LARS, per tensor': lambda ps: ours(ps, foreach=False),
    'mocoplug MoCoV3LARS, foreach': lambda ps: ours(ps, foreach=True),
    "mmpretrain's LARS": mmpretrain_lars,
}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='benchmark.py lars', description=__doc__.split('\n')[0])
    parser.add_argument(
        '--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--repeats', type=int, default=20)
    args = parser.parse_args(argv)

    optimizers = {
        name: build(params_with_grads(args.device))
        for name, build in IMPLEMENTATIONS.items()
    }
    times = round_robin_ms({
        name: opt.step
        for name, opt in optimizers.items()
    }, args.device, args.repeats)
    results = {
        name: (statistics.median(times[name]),
               host_syncs(opt.step) if args.device == 'cuda' else None)
        for name, opt in optimizers.items()
    }

    params = [
        p for group in optimizers["mmpretrain's LARS"].param_groups
        for p in group['params']
    ]
    n = sum(p.numel() for p in params)
    adapted = sum(p.ndim > 1 for p in params)
    where = machine(args.device)
    print(f'one LARS step on MoCo v3 R50 + projector + predictor '
          f'({n / 1e6:.1f}M parameters in {len(params)} tensors, '
          f'{adapted} adapted) on {where}, torch {torch.__version__}:')
    base = results["mmpretrain's LARS"][0]
    print(f'  {"implementation":34s} {"ms/step":>9s} {"vs mmpretrain":>14s}'
          f' {"host syncs":>11s}')
    for name, (ms, syncs) in results.items():
        shown = 'n/a (CPU)' if syncs is None else str(syncs)
        print(f'  {name:34s} {ms:9.2f} {base / ms:13.2f}x {shown:>11s}')
    return results


if __name__ == '__main__':
    main()
