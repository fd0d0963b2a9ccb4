# Copyright (c) mocoplug contributors. All rights reserved.
"""Measure what MoCo v2 learns from a small folder of real photographs
(scikit-image's), from scratch and continued from other weights: README.md's
table (the method: configs/mocov2/README.md#on-real-photographs)."""
import argparse
import json
import os.path as osp
import sys
import time

from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import set_random_seed

from mocoplug.registry import MODELS

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
from demo import KNN, ROOT, digits_loader, encode  # noqa: E402 isort: skip
from demo import estimate_bn_statistics, knn_figures  # noqa: E402 isort: skip
from demo import pretrain, summarise  # noqa: E402 isort: skip

CONFIG = osp.join(ROOT, 'configs', 'mocov2',
                  'mocov2_smallconv4-w32_1xb64-coslr_photo-tiles.py')
SOURCE_TILES = 5000


def run_cfg(split: str, tiles: int, iters: int, encoders_from=None):
    """The config for ``iters`` iterations on ``tiles`` tiles, queue at
    most 4 keys per tile (the folder rule), no kNN monitor."""
    cfg = Config.fromfile(CONFIG)
    epochs = max(1, round(iters * cfg.train_dataloader.batch_size / tiles))
    cfg.train_dataloader.dataset.update(split=split, num_tiles=tiles)
    cfg.model.queue.size = min(4 * tiles, 4096)
    cfg.model.encoders_from = encoders_from
    cfg.train_cfg.max_epochs = cfg.default_hooks.checkpoint.interval = epochs
    cfg.param_scheduler[0].update(T_max=epochs, end=epochs)
    cfg.custom_hooks = cfg.custom_hooks[:1]  # the momentum update
    return cfg


def knn(model, feature_fn=None) -> dict:
    """The demo's kNN figures of the 12 photographs' tiles."""
    with DefaultScope.overwrite_default_scope('mocoplug'):
        return knn_figures(
            encode(model, feature_fn, 'PhotoTilesDataset', 'memory'), 12)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[300, 3000])
    parser.add_argument('--iters', type=int, default=300)
    parser.add_argument('--source-iters', type=int, default=1500)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--work-dir', default='work_dirs/photo_rules')
    args = parser.parse_args(argv)
    started = time.time()
    cfg = run_cfg('source', SOURCE_TILES, args.source_iters)
    source_dir = osp.join(args.work_dir, 'source')
    print(
        f'released-weights stand-in: {args.source_iters} iterations on '
        f'{SOURCE_TILES} tiles of other images',
        flush=True)
    source_model, _ = pretrain(cfg, 0, source_dir)
    source = osp.join(source_dir, f'epoch_{cfg.train_cfg.max_epochs}.pth')
    rows = {'raw pixels': [], 'random init': [], 'released weights': []}
    rows['released weights'].append(knn(source_model))
    for size in args.sizes:
        for init, start in (('scratch', None), ('continued', source)):
            name = f'MoCo v2 {init}, {size} tiles'
            rows[name] = []
            for seed in args.seeds:
                cfg = run_cfg('train', size, args.iters, start)
                print(
                    f'{name}, seed {seed}: {cfg.train_cfg.max_epochs} '
                    f'epochs, queue {cfg.model.queue.size}',
                    flush=True)
                model, _ = pretrain(
                    cfg, seed,
                    osp.join(args.work_dir, f'{init}{size}-seed{seed}'))
                rows[name].append(knn(model))
    cfg.model.encoders_from = None  # the last run's model, at random init
    with DefaultScope.overwrite_default_scope('mocoplug'):
        for seed in args.seeds:
            set_random_seed(seed)
            model = MODELS.build(
                dict(cfg.model, data_preprocessor=cfg.data_preprocessor))
            model.init_weights()
            estimate_bn_statistics(
                model, digits_loader('memory', dataset='PhotoTilesDataset'))
            rows['random init'].append(knn(model))
            if seed == args.seeds[0]:
                rows['raw pixels'].append(knn(model, lambda x: x.flatten(1)))
    summary = summarise(rows)  # mean and spread per encoder and test set
    print(f'\nweighted kNN top-1 (%) of held-out tiles of 12 photographs '
          f'(k={KNN["k"]}), {args.iters} iterations of 64 per run, seeds '
          f'{args.seeds}')
    print(f'{"encoder":<36}{"clean":>16}{"perturbed":>16}')
    for name, stats in summary.items():
        print(f'{name:<36}' + ''.join(f'{s["mean"]:>9.1f} ± {s["std"]:<4.1f}'
                                      for s in stats.values()))
    result = dict(
        summary=summary,
        runs=rows,
        args=vars(args),
        minutes=round((time.time() - started) / 60, 1),
        chance=100 / 12)
    with open(osp.join(args.work_dir, 'results.json'), 'w') as f:
        json.dump(result, f, indent=1)
    print(f'{result["minutes"]} min; {args.work_dir}/results.json')
    return result


if __name__ == '__main__':
    main()
