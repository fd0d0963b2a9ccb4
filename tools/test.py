# Copyright (c) mocoplug contributors. All rights reserved.
"""Evaluate a trained model (a linear classifier, a detector) from its
config and checkpoint, as mmpretrain's tools/test.py does."""
import argparse
import importlib.util
import json
import os.path as osp

from mmengine.config import Config
from mmengine.dist import get_rank

import mocoplug  # noqa: F401  (registers components, fixes ckpt loading)
from mocoplug.utils import parse_launch_args

_spec = importlib.util.spec_from_file_location(
    'tools_train', osp.join(osp.dirname(osp.abspath(__file__)), 'train.py'))
train = importlib.util.module_from_spec(_spec)  # its shared options
_spec.loader.exec_module(train)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir')
    parser.add_argument('--out', help='the metrics as JSON')
    return parse_launch_args(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    train.set_work_dir(cfg, args)
    if cfg.get('test_dataloader') is None or cfg.get('test_evaluator') is None:
        raise ValueError(
            f'{args.config} has no test_dataloader/test_evaluator to test '
            'with; use an evaluation config from configs/benchmarks/ or '
            'configs/detection/')
    cfg.load_from = args.checkpoint
    runner = train.build_runner(cfg)
    rank = get_rank()  # (the group is left once the test is done)
    metrics = runner.test()
    if args.out and rank == 0:  # one file, not one write per process
        with open(args.out, 'w') as f:
            json.dump({k: float(v) for k, v in metrics.items()}, f, indent=2)
    return metrics


if __name__ == '__main__':
    main()
