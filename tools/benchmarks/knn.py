# Copyright (c) mocoplug contributors. All rights reserved.
"""Time the weighted kNN evaluation at ImageNet size on random features:
sharded (``--baseline``: and unsharded) time, queries/s, peak memory."""
import threading
import time
from typing import Dict

import torch

from mocoplug.evaluation import (FeatureShard, sharded_weighted_knn_accuracy,
                                 weighted_knn_scores)
from .common import machine, parser, rss_bytes, synchronize, write_json


def random_features(rows: int, dim: int, dtype: torch.dtype, device: str,
                    gen: torch.Generator) -> torch.Tensor:
    """Gaussian rows, made in blocks (no whole float32 copy is made)."""
    out = torch.empty(rows, dim, dtype=dtype, device=device)
    for start in range(0, rows, 65536):
        block = torch.randn(
            min(65536, rows - start), dim, generator=gen, device='cpu')
        out[start:start + block.shape[0]] = block.to(device, dtype)
    return out


class PeakMemory:
    """Peak memory of a block above its start in MiB (``extra_mib``): CUDA
    allocations, or on a CPU the resident set read every 2 ms."""

    def __init__(self, device: str):
        self.device, self.done = device, threading.Event()

    def __enter__(self):
        if self.device == 'cuda':
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated() / 2**20
        else:
            self.start = self.peak = rss_bytes() / 2**20
            self.thread = threading.Thread(target=self._watch, daemon=True)
            self.thread.start()
        return self

    def _watch(self):
        while not self.done.wait(0.002):
            self.peak = max(self.peak, rss_bytes() / 2**20)

    def __exit__(self, *exc):
        if self.device == 'cuda':
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() / 2**20
        else:
            self.done.set()
            self.thread.join()
            self.peak = max(self.peak, rss_bytes() / 2**20)
        self.extra_mib = max(0., self.peak - self.start)


def timed(fn, queries: int, device: str) -> dict:
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        accuracy = fn()
        synchronize(device)
        seconds = time.perf_counter() - start
    return dict(
        seconds=round(seconds, 3),
        queries_per_s=round(queries / seconds, 1),
        peak_extra_mib=round(memory.extra_mib, 1),
        accuracy=accuracy)


def main(argv=None) -> Dict:
    p = parser(
        __doc__,
        'knn',
        out='--json',
        bank=1281167,  # ImageNet-1k's train split
        queries=50000,  # its val split
        dim=2048,
        classes=1000,
        project_queries=None)  # the time for this many queries
    p.add_argument('--topk', type=int, nargs='+', default=[20, 200])
    dtypes = ['float32', 'float16', 'bfloat16']  # read in float32 chunks
    p.add_argument('--bank-dtype', choices=dtypes, default='float32')
    p.add_argument('--baseline', action='store_true')
    args = p.parse_args(argv)
    device, n = args.device, args.queries
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    dtype = getattr(torch, args.bank_dtype)
    bank = random_features(args.bank, args.dim, dtype, device, gen)
    query = random_features(n, args.dim, torch.float32, device, gen)
    bank_labels, query_labels = (
        torch.randint(0, args.classes, (m, ), generator=gen).to(device)
        for m in (args.bank, n))
    made_s = time.perf_counter() - start
    features_mib = (bank.numel() * bank.element_size() + query.numel() * 4)

    def sharded():
        shards = (FeatureShard(f, y, torch.arange(len(f), device=device))
                  for f, y in ((query, query_labels), (bank, bank_labels)))
        return sharded_weighted_knn_accuracy(
            *shards, args.classes, args.topk, distributed=False)

    def baseline():
        """The whole memory cast to float32, the similarities per k."""
        out = {}
        for k in args.topk:
            pred = weighted_knn_scores(query, bank, bank_labels, args.classes,
                                       k).argmax(dim=1)
            accuracy = (pred == query_labels).float().mean().item()
            out[f'top1_k{k}'] = accuracy * 100
        return out

    result = dict(
        config=vars(args),
        machine=machine(device),
        torch=torch.__version__,
        features_mib=round(features_mib / 2**20, 1),
        make_features_s=round(made_s, 2),
        sharded=timed(sharded, n, device))
    if args.project_queries:
        result['sharded']['projected_s'] = round(
            result['sharded']['seconds'] * args.project_queries / n, 1)
    if args.baseline:
        result['baseline'] = timed(baseline, n, device)
    print(f"\n{result['machine']}; memory {args.bank} x {args.dim} "
          f"{args.bank_dtype} ({result['features_mib']:.0f} MiB with the "
          f"queries), {n} queries, {args.classes} classes, "
          f"k {args.topk}, device {device}")
    print('| computation | s | queries/s | peak memory above the features, '
          'MiB | projected s |\n|---|---|---|---|---|')
    for name in ('sharded', 'baseline'):
        if name in result:
            r = result[name]
            print(f"| {name} | {r['seconds']:.2f} | "
                  f"{r['queries_per_s']:.0f} | {r['peak_extra_mib']:.0f} | "
                  f"{r.get('projected_s', '')} |")
    write_json(result, args.json)
    return result
