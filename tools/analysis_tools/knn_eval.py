# Copyright (c) mocoplug contributors. All rights reserved.
"""Weighted kNN top-1 of a pretrained backbone (no training); the config
gives ``model``, ``knn_memory_dataloader``, ``knn_query_dataloader`` and
``knn`` (configs/benchmarks/knn_*.py; ``--data-root``: evaluation.md)."""
import argparse
import json
import os
import os.path as osp

import torch
from mmengine.config import Config
from mmengine.dist import get_rank
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

import mocoplug  # noqa: F401
from mocoplug.datasets import labelled_folder_classes
from mocoplug.engine.runner.cpu_distributed import init_dist_for_this_machine
from mocoplug.evaluation import (check_one_pass, extract_feature_shard,
                                 sharded_weighted_knn_accuracy)
from mocoplug.registry import MODELS
from mocoplug.utils import fill_pretrained, parse_launch_args

REQUIRED = ('model', 'knn_memory_dataloader', 'knn_query_dataloader')


def use_labelled_folder(cfg: Config, root: str) -> bool:
    """Point the memory and query sets at a labelled folder (their pipelines
    kept); True without train/ and val/ splits (leave-one-out)."""
    if not osp.isdir(root):
        raise SystemExit(f'--data-root {root!r} is not a folder')
    splits = [s for s in ('train', 'val', 'test') if osp.isdir(f'{root}/{s}')]
    split = splits == ['train', 'val']
    if splits and not split:
        raise SystemExit(
            f'--data-root {root!r} has {", ".join(s + "/" for s in splits)}:'
            ' read are DIR/train/<class>/* with DIR/val/<class>/* (memory, '
            'queries; rename test/ to val/), or DIR/<class>/* (leave-one-out)')
    prefixes = ('train', 'val') if split else ('', '')
    classes = [labelled_folder_classes(osp.join(root, p)) for p in prefixes]
    if len(classes[0]) < 2:
        raise SystemExit(f'--data-root {root!r}: kNN accuracy needs 2 classes '
                         f'or more, found {classes[0]}')
    if classes[0] != classes[1]:
        raise SystemExit(
            f'--data-root {root!r}: train/ has the classes {classes[0]} but '
            f'val/ has {classes[1]}; both need the same class sub-folders.')
    for field, prefix in zip(REQUIRED[1:], prefixes):
        cfg[field].dataset = dict(
            type='CustomDataset',
            data_root=root,
            data_prefix=prefix,
            with_label=True,
            pipeline=cfg[field].dataset.pipeline)
    return not split


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='kNN config (configs/benchmarks/)')
    parser.add_argument('checkpoint', help='MoCo checkpoint to evaluate')
    parser.add_argument(
        '--data-root', help='DIR/{train,val}/<class>/*, or DIR/<class>/*')
    parser.add_argument('--out', help='the figures as JSON')
    return parse_launch_args(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    missing = [k for k in REQUIRED if k not in cfg]
    if missing:
        raise SystemExit(f'{args.config} lacks {missing}: start from '
                         'configs/benchmarks/knn_r50_in1k.py')
    leave_one_out = bool(args.data_root) and use_labelled_folder(
        cfg, args.data_root)
    cfg.pretrained = args.checkpoint
    fill_pretrained(cfg)
    if args.launcher != 'none':  # gloo on CPU ranks
        init_dist_for_this_machine(args.launcher,
                                   cfg.get('env_cfg', {}).get('dist_cfg'))
    knn = dict(dict(topk=(20, 200), temperature=0.07), **cfg.get('knn', {}))
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        model_cfg = cfg.model.copy()
        if 'data_preprocessor' in cfg:
            model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
        model = MODELS.build(model_cfg)
        model.init_weights()
        model = model.cuda() if torch.cuda.is_available() else model
        loaders = [
            Runner.build_dataloader(cfg[k], seed=0)
            for k in REQUIRED[1:2 if leave_one_out else 3]
        ]
    num_classes = len(loaders[0].dataset.metainfo.get('classes') or ())
    if not num_classes:
        raise SystemExit('the memory dataset declares no classes')
    for field, loader in zip(REQUIRED[1:], loaders):
        try:
            check_one_pass(loader, field)
        except ValueError as error:
            raise SystemExit(str(error)) from None
    bank = extract_feature_shard(model, loaders[0], model.backbone, 'memory')
    query = bank if leave_one_out else extract_feature_shard(
        model, loaders[1], model.backbone, 'queries')
    results = sharded_weighted_knn_accuracy(
        query, bank, num_classes, exclude_self=leave_one_out, **knn)
    if get_rank() != 0:
        return None
    num_query, num_bank = len(loaders[-1].dataset), len(loaders[0].dataset)
    protocol = (f'leave-one-out over {num_bank} images' if leave_one_out else
                f'on {num_query} queries, {num_bank} memory images')
    capped = [k for k in knn['topk'] if f'top1_k{k}' not in results]
    print(f'weighted kNN (t={knn["temperature"]}) {protocol}: ' +
          ', '.join(f'{k} {v:.2f}' for k, v in results.items()) +
          (f' (k={capped} capped at the memory size'
           f'{" less one" if leave_one_out else ""})' if capped else ''))
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == '__main__':
    main()
