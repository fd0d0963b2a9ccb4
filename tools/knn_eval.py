# Copyright (c) mocoplug contributors. All rights reserved.
"""Weighted kNN top-1 of a pretrained backbone (no training).

The config gives the backbone (`model`, whose backbone init_cfg is
mocoplug's Pretrained initialiser), `knn_memory_dataloader`,
`knn_query_dataloader` and `knn = dict(topk=..., temperature=...)`; see
configs/benchmarks/knn_*.py.

    python tools/knn_eval.py configs/benchmarks/knn_r50_in1k.py CKPT
    torchrun --nproc_per_node 8 tools/knn_eval.py CONFIG CKPT \\
        --launcher pytorch
"""
import argparse
import json
import os
import os.path as osp

import torch
from mmengine.config import Config, DictAction
from mmengine.dist import get_rank, init_dist
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

import mocoplug  # noqa: F401
from mocoplug.evaluation import extract_features, weighted_knn_accuracy
from mocoplug.registry import MODELS
from mocoplug.utils import fill_pretrained

REQUIRED = ('model', 'knn_memory_dataloader', 'knn_query_dataloader')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='kNN config (configs/benchmarks/)')
    parser.add_argument('checkpoint', help='MoCo checkpoint to evaluate')
    parser.add_argument('--out', help='also write the figures to this JSON')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value pairs')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    missing = [k for k in REQUIRED if k not in cfg]
    if missing:
        raise SystemExit(f'{args.config} lacks {missing}: start from '
                         'configs/benchmarks/knn_r50_in1k.py')
    cfg.pretrained = args.checkpoint
    fill_pretrained(cfg)
    if args.launcher != 'none':
        init_dist(args.launcher)
    knn = dict(topk=(20, 200), temperature=0.07)
    knn.update(cfg.get('knn', {}))

    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        model_cfg = cfg.model.copy()
        if 'data_preprocessor' in cfg:
            model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
        model = MODELS.build(model_cfg)
        model.init_weights()
        if torch.cuda.is_available():
            model = model.cuda()
        loaders = [
            Runner.build_dataloader(cfg[k], seed=0) for k in REQUIRED[1:]
        ]
    num_classes = len(loaders[0].dataset.metainfo.get('classes') or ())
    if not num_classes:
        raise SystemExit('the memory dataset declares no classes')
    bank, bank_labels = extract_features(model, loaders[0], model.backbone)
    query, labels = extract_features(model, loaders[1], model.backbone)
    if get_rank() != 0:
        return None
    results = weighted_knn_accuracy(query, labels, bank, bank_labels,
                                    num_classes, knn['topk'],
                                    knn['temperature'])
    print(f'weighted kNN (t={knn["temperature"]}) on {len(labels)} queries, '
          f'{len(bank_labels)} memory images: ' +
          ', '.join(f'{k} {v:.2f}' for k, v in results.items()))
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == '__main__':
    main()
