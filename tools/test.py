# Copyright (c) mocoplug contributors. All rights reserved.
"""Evaluate a trained model (a linear classifier, a detector) from its
config and checkpoint, mmpretrain's tools/test.py conventions. What the
config's values mean (``data_root=``, ``default_hooks.NAME=None``, CPU/gloo
runs) is its runner's, ``mocoplug.MoCoRunner`` (see tools/train.py).

Example::

    python tools/test.py configs/benchmarks/CONFIG work_dirs/.../epoch_100.pth
"""
import argparse
import json
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

import mocoplug  # noqa: F401  (registers components, fixes ckpt loading)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--work-dir', help='the dir to save logs and the metrics file')
    parser.add_argument(
        '--out', help='also write the metrics to this JSON file')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value pairs')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    if cfg.get('test_dataloader') is None or cfg.get('test_evaluator') is None:
        raise ValueError(
            f'{args.config} has no test_dataloader/test_evaluator to test '
            'with; use an evaluation config from configs/benchmarks/ or '
            'configs/detection/')
    cfg.load_from = args.checkpoint
    if 'runner_type' in cfg:  # mocoplug's configs: mocoplug.MoCoRunner
        runner = RUNNERS.build(cfg)
    else:
        runner = Runner.from_cfg(cfg)
    metrics = runner.test()
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({k: float(v) for k, v in metrics.items()}, f, indent=2)
    return metrics


if __name__ == '__main__':
    main()
