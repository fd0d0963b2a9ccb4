# Copyright (c) mocoplug contributors. All rights reserved.
"""Turn work dirs' scalars logs into PNG curves (loss, contrastive accuracy,
lr, momentum, kNN, health/*: whatever the run logged)."""
import argparse
import os.path as osp

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


def main(argv=None):
    args = parse_args(argv)
    labels = args.labels or ([''] if len(args.runs) == 1 else [
        osp.basename(osp.normpath(r)) for r in args.runs
    ])
    if len(labels) != len(args.runs):
        raise SystemExit(f'--labels: got {len(labels)} labels for '
                         f'{len(args.runs)} runs')
    runs = {label: load_scalars(run) for label, run in zip(labels, args.runs)}
    out = args.out or osp.join(args.runs[0], 'curves')
    written = plot_scalar_curves(runs, out)
    if not written:
        raise SystemExit('No known metric (loss, contrast_acc, lr, momentum, '
                         'knn/*, health/*) in the scalars log')
    for path in written:
        print(path)
    return written


if __name__ == '__main__':
    main()
