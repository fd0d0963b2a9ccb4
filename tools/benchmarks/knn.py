# Copyright (c) mocoplug contributors. All rights reserved.
"""Time the weighted kNN evaluation at ImageNet size on random features.

A memory of ``--bank`` features of ``--dim`` channels (ImageNet-1k's train
split: 1,281,167 x 2048 after a ResNet-50) with labels of ``--classes``
classes, ``--queries`` query features (its val split: 50,000), the top-1
for every k of ``--topk``: the computation ``KNNMonitorHook`` and
``tools/analysis_tools/knn_eval.py`` run
(:func:`~mocoplug.evaluation.sharded_weighted_knn_accuracy`), in one
process on ``--device``. Prints and writes (``--json``) the time, the
queries per second, the peak memory above what the features themselves
take, and, with ``--project-queries``, the time that many queries would take
(the work is linear in the queries).

    # ImageNet size on a GPU (10.5 GB of float32 memory features)
    python tools/benchmarks/benchmark.py knn --device cuda
    # on a CPU with 24 GB: float16 memory (5.2 GB), 1000 queries, projected
    python tools/benchmarks/benchmark.py knn --device cpu \\
        --bank-dtype float16 --queries 1000 --project-queries 50000
    # the unsharded computation (a similarity matrix per k, the memory cast
    # to float32 whole) on a smaller memory, for comparison
    python tools/benchmarks/benchmark.py knn --bank 200000 --queries 2000 \\
        --baseline

Random features have no neighbours worth the name, so the accuracy is that
of chance; the figures here are time and memory.
"""
import argparse
import threading
import time
from typing import Dict, Optional

import torch

from mocoplug.evaluation import (FeatureShard, sharded_weighted_knn_accuracy,
                                 weighted_knn_scores)
from .common import machine, rss_bytes, synchronize, write_json

IMAGENET_TRAIN, IMAGENET_VAL = 1281167, 50000


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='benchmark.py knn', description=__doc__.split('\n')[0])
    parser.add_argument('--bank', type=int, default=IMAGENET_TRAIN)
    parser.add_argument('--queries', type=int, default=IMAGENET_VAL)
    parser.add_argument('--dim', type=int, default=2048)
    parser.add_argument('--classes', type=int, default=1000)
    parser.add_argument('--topk', type=int, nargs='+', default=[20, 200])
    parser.add_argument(
        '--bank-dtype',
        choices=['float32', 'float16', 'bfloat16'],
        default='float32',
        help='storage of the memory features (read in float32 chunks)')
    parser.add_argument('--query-chunk', type=int, default=4096)
    parser.add_argument('--bank-chunk', type=int, default=32768)
    parser.add_argument(
        '--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument(
        '--project-queries',
        type=int,
        default=None,
        help='also give the time projected to this many queries')
    parser.add_argument(
        '--baseline',
        action='store_true',
        help='also time weighted_knn_scores once per k (the unsharded '
        'computation)')
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--json', default=None, help='write results here')
    return parser.parse_args(argv)


def random_features(rows: int, dim: int, dtype: torch.dtype, device: str,
                    gen: torch.Generator) -> torch.Tensor:
    """Gaussian rows, made in blocks so that no float32 copy of a
    lower-precision memory is ever whole."""
    out = torch.empty(rows, dim, dtype=dtype, device=device)
    for start in range(0, rows, 65536):
        block = torch.randn(
            min(65536, rows - start), dim, generator=gen, device='cpu')
        out[start:start + block.shape[0]] = block.to(device, dtype)
    return out


def rss_mib() -> float:
    return rss_bytes() / 2**20


class PeakMemory:
    """Peak memory of a block above what was in use when it began: CUDA
    allocations on a GPU; on a CPU the process's resident set, read every
    few milliseconds by a thread (large allocations live far longer)."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self):
        if self.device == 'cuda':
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated() / 2**20
        else:
            self.start = self.peak = rss_mib()
            self.done = threading.Event()
            self.thread = threading.Thread(target=self._watch, daemon=True)
            self.thread.start()
        return self

    def _watch(self):
        while not self.done.wait(0.002):
            self.peak = max(self.peak, rss_mib())

    def __exit__(self, *exc):
        if self.device == 'cuda':
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() / 2**20
        else:
            self.done.set()
            self.thread.join()
            self.peak = max(self.peak, rss_mib())
        self.extra_mib = max(0., self.peak - self.start)


def baseline_accuracy(query, query_labels, bank, bank_labels, classes,
                      topk) -> Dict[str, float]:
    """The unsharded computation, for comparison: the whole memory cast to
    float32 and normalised, the similarity matrix computed again for every
    k."""
    out = {}
    for k in topk:
        pred = weighted_knn_scores(query, bank, bank_labels, classes,
                                   k).argmax(dim=1)
        out[f'top1_k{k}'] = (pred == query_labels).float().mean().item() * 100
    return out


def timed(fn, device: str):
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        result = fn()
        synchronize(device)
        seconds = time.perf_counter() - start
    return result, seconds, memory.extra_mib


def main(argv=None) -> Dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.bank_dtype)
    gen = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    bank = random_features(args.bank, args.dim, dtype, args.device, gen)
    query = random_features(args.queries, args.dim, torch.float32, args.device,
                            gen)
    bank_labels = torch.randint(
        0, args.classes, (args.bank, ), generator=gen).to(args.device)
    query_labels = torch.randint(
        0, args.classes, (args.queries, ), generator=gen).to(args.device)
    made_s = time.perf_counter() - start
    features_mib = (bank.numel() * bank.element_size() +
                    query.numel() * 4) / 2**20

    def sharded():
        return sharded_weighted_knn_accuracy(
            FeatureShard(query, query_labels,
                         torch.arange(args.queries, device=args.device)),
            FeatureShard(bank, bank_labels,
                         torch.arange(args.bank, device=args.device)),
            args.classes,
            args.topk,
            query_chunk=args.query_chunk,
            bank_chunk=args.bank_chunk,
            distributed=False)

    accuracy, seconds, extra = timed(sharded, args.device)
    result = dict(
        config=vars(args),
        machine=machine(args.device),
        torch=torch.__version__,
        features_mib=round(features_mib, 1),
        make_features_s=round(made_s, 2),
        sharded=dict(
            seconds=round(seconds, 3),
            queries_per_s=round(args.queries / seconds, 1),
            peak_extra_mib=round(extra, 1),
            accuracy=accuracy))
    if args.project_queries:
        result['sharded']['projected_s'] = round(
            seconds * args.project_queries / args.queries, 1)
    if args.baseline:
        accuracy, seconds, extra = timed(
            lambda: baseline_accuracy(query, query_labels, bank, bank_labels,
                                      args.classes, args.topk), args.device)
        result['baseline'] = dict(
            seconds=round(seconds, 3),
            queries_per_s=round(args.queries / seconds, 1),
            peak_extra_mib=round(extra, 1),
            accuracy=accuracy)
    print_result(result)
    write_json(result, args.json)
    return result


def print_result(result: Dict, out: Optional[callable] = print) -> None:
    cfg = result['config']
    out(f"\n{result['machine']}; memory {cfg['bank']} x {cfg['dim']} "
        f"{cfg['bank_dtype']} ({result['features_mib']:.0f} MiB with the "
        f"queries), {cfg['queries']} queries, {cfg['classes']} classes, "
        f"k {cfg['topk']}, device {cfg['device']}")
    out('| computation | s | queries/s | peak memory above the features, '
        'MiB | projected s |')
    out('|---|---|---|---|---|')
    for name in ('sharded', 'baseline'):
        if name in result:
            r = result[name]
            out(f"| {name} | {r['seconds']:.2f} | {r['queries_per_s']:.0f} | "
                f"{r['peak_extra_mib']:.0f} | {r.get('projected_s', '')} |")


if __name__ == '__main__':
    main()
