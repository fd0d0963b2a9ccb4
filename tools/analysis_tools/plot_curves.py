# Copyright (c) mocoplug contributors. All rights reserved.
"""Turn work dirs' scalars logs into PNG curves (loss, contrastive accuracy,
lr, momentum, kNN, health/*: whatever the run logged)."""
import argparse
import os
import os.path as osp
from typing import List

from mocoplug.visualization import load_scalars, plot_scalar_curves


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        'runs',
        nargs='+',
        help='work dirs (their latest run) or scalars.json files')
    parser.add_argument('--labels', nargs='+', help='one legend label per run')
    parser.add_argument(
        '--out', help='output folder (default: <first run>/curves)')
    return parser.parse_args(argv)


def run_labels(runs: List[str]) -> List[str]:
    """One legend label per run: the shortest ends of their paths that
    differ ('a/mocov2', 'b/mocov2'), '' for a single run."""
    if len(runs) == 1:
        return ['']
    parts = [osp.abspath(r).rstrip(os.sep).split(os.sep) for r in runs]
    for depth in range(1, max(map(len, parts)) + 1):
        labels = ['/'.join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    raise SystemExit(f'a run is given twice: {runs}')


def main(argv=None):
    args = parse_args(argv)
    labels = args.labels or run_labels(args.runs)
    if len(labels) != len(args.runs) or len(set(labels)) != len(labels):
        raise SystemExit(f'--labels: got {labels} for {len(args.runs)} '
                         'runs; give one distinct label per run')
    runs = {label: load_scalars(run) for label, run in zip(labels, args.runs)}
    out = args.out or osp.join(args.runs[0], 'curves')
    written = plot_scalar_curves(runs, out)
    if not written:
        raise SystemExit('No known metric (loss, contrast_acc, lr, momentum, '
                         'knn/*, health/*) in the scalars log')
    print(*written, sep='\n')
    return written


if __name__ == '__main__':
    main()
