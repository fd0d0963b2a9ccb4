# Copyright (c) mocoplug contributors. All rights reserved.
"""Measure what bands and bits carry for MoCo v2 on the digits: written into
band 4 of 4 (16-bit, noise in bands 1-3), all bands against the 3 channels of
8 bits a colour decode gives; written as 1-band 16-bit PNGs, against the same
replicated to 3 channels of 8 bits: weighted kNN top-1 of the held-out digits
and the median step time without the data wait (configs/mocov2/README.md,
"Bands and bit depth")."""
import argparse
import json
import os
import os.path as osp
import statistics
import sys

import mmcv
import numpy as np
import torch
from mmengine.registry import DefaultScope

from mocoplug.datasets import DigitsDataset, find_images
from mocoplug.evaluation import extract_features

HERE = osp.dirname(osp.abspath(__file__))
sys.path[:0] = [HERE, osp.dirname(HERE)]
from band_stats import band_stats  # noqa: E402 isort: skip
from demo import KNN, ROOT, knn_figures, loader  # noqa: E402 isort: skip
from demo import load_config, pretrain, summarise  # noqa: E402 isort: skip

CONFIG = osp.join(ROOT, 'configs', 'mocov2',
                  'mocov2_smallconv4-w32_1xb64-coslr-15e_{}-folder.py')
LOADERS = dict(band4='tifffile', gray16='cv2')  # the every-band decode


def write_folder(root: str, kind: str, seed: int = 0) -> None:
    """The digits (train/ and val/, one sub-folder a class) as ``band4``:
    32x32x4 uint16 TIFFs, the digit x 257 in band 4 (an extra sample, not
    alpha), uniform noise in bands 1-3; or ``gray16``: 32x32 uint16 PNGs."""
    rng = np.random.default_rng(seed)
    for split, folder in (('train', 'train'), ('test', 'val')):
        dataset = DigitsDataset(split=split)
        for info in map(dataset.get_data_info, range(len(dataset))):
            digit = info['img'][..., 0].astype(np.uint16) * 257
            path = osp.join(root, folder, str(info['gt_label']),
                            f'{info["digits_index"]:04d}')
            os.makedirs(osp.dirname(path), exist_ok=True)
            if kind == 'gray16':
                mmcv.imwrite(digit, path + '.png')
                continue
            import tifffile
            noise = rng.integers(0, 65536, (*digit.shape, 3), np.uint16)
            tifffile.imwrite(
                path + '.tif',
                np.dstack([noise, digit]),
                photometric='rgb',
                extrasamples=['unspecified'])


def write_decoded(source: str, root: str) -> None:
    """``source``'s images as the digits-folder config's loader decodes
    them (cv2, colour: 3 channels of 8 bits), kept exactly in PNG files."""
    for path in find_images(source):
        out = osp.join(root, osp.splitext(osp.relpath(path, source))[0])
        with open(path, 'rb') as f:
            mmcv.imwrite(mmcv.imfrombytes(f.read()), out + '.png')


def run_cfg(config: str, root: str, epochs: int, backend: str = None):
    """``config`` on ``root``/train for ``epochs``, the multiband one with
    the folder's bands and statistics (band_stats.py)."""
    cfg = load_config(epochs, config)
    cfg.train_dataloader.dataset.data_root = osp.join(root, 'train')
    if backend:  # the multiband config
        cfg.train_dataloader.dataset.pipeline[0].imdecode_backend = backend
        mean, std, (bands, _) = band_stats(find_images(root + '/train'))
        cfg.data_preprocessor.update(mean=mean.tolist(), std=std.tolist())
        cfg.model.backbone.in_channels = bands
    cfg.default_hooks.checkpoint.interval = epochs
    cfg.custom_hooks = cfg.custom_hooks[:1]  # the momentum update
    return cfg


def knn(model, cfg, root: str) -> float:
    """Weighted kNN top-1 (%) of val/ against train/ (the demo's k and
    temperature), the images decoded by the config's loader."""
    load = cfg.train_dataloader.dataset.pipeline[0]
    dataset = dict(
        type='CustomDataset',
        data_root=root,
        with_label=True,
        pipeline=[load, dict(type='PackInputs')])
    with DefaultScope.overwrite_default_scope('mocoplug'):
        feats = {
            p: extract_features(model, loader(dict(dataset, data_prefix=p)))
            for p in ('train', 'val')
        }
    return knn_figures(feats, names=('val', ))['val']


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--kinds', nargs='+', default=list(LOADERS))
    parser.add_argument('--epochs', type=int, default=15)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--work-dir', default='work_dirs/band_rules')
    args = parser.parse_args(argv)
    rows = {}
    for kind in args.kinds:
        data = osp.join(args.work_dir, 'data', kind)
        if not osp.isdir(data):
            write_folder(data, kind)
            write_decoded(data, data + '-decoded')
        runs = {
            'every band and bit': ('multiband', data, LOADERS[kind]),
            '3 channels of 8 bits': ('digits', data + '-decoded', None)
        }
        for what, (config, root, backend) in runs.items():
            name, config = f'{kind}, {what}', CONFIG.format(config)
            row = rows[name] = dict(knn=[], step_ms=[])
            for seed in args.seeds:
                cfg = run_cfg(config, root, args.epochs, backend)
                work_dir = osp.join(args.work_dir, f'{name}-{seed}')
                model, scalars = pretrain(cfg, seed, work_dir)
                times = [  # the step without the wait for data
                    r['time'] - r['data_time'] for r in scalars if 'time' in r
                ]
                row['step_ms'].append(1000 *
                                      statistics.median(times[1:] or times))
                row['knn'].append(knn(model, cfg, root))
                print(
                    f'{name}, seed {seed}: kNN {row["knn"][-1]:.1f}%, '
                    f'{row["step_ms"][-1]:.0f} ms a step',
                    flush=True)
    summary = summarise({name: [row] for name, row in rows.items()})
    print(f'\nweighted kNN top-1 (%) of the 539 held-out digits (k '
          f'{KNN["k"]}, chance 10), {args.epochs} epochs, seeds {args.seeds}; '
          f'median step time (ms), {torch.get_num_threads()} threads')
    print(f'{"input":<36}{"kNN top-1":>16}{"step ms":>16}')
    for name, stats in summary.items():
        print(f'{name:<36}' + ''.join(f'{s["mean"]:>9.1f} ± {s["std"]:<4.1f}'
                                      for s in stats.values()))
    with open(osp.join(args.work_dir, 'results.json'), 'w') as f:
        json.dump(dict(summary=summary, runs=rows, args=vars(args)), f)
    return summary


if __name__ == '__main__':
    main()
