# Copyright (c) mocoplug contributors. All rights reserved.
"""Train a model from a config (mmpretrain's tools/train.py and its flags)
with the config's ``runner_type`` (``mocoplug.MoCoRunner``)."""
import argparse
import os.path as osp

from mmengine.config import Config, ConfigDict
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

import mocoplug  # noqa: F401  (registers components, fixes ckpt loading)
from mocoplug.utils import parse_launch_args


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--resume', nargs='?', const='auto', help='CKPT (none: the latest)')
    parser.add_argument(
        '--amp', action='store_true', help='float16 on GPU, bfloat16 on CPU')
    for flag in ('--no-validate', '--auto-scale-lr', '--no-pin-memory',
                 '--no-persistent-workers'):
        parser.add_argument(flag, action='store_true')
    return parse_launch_args(parser, argv)


def set_work_dir(cfg: Config, args: argparse.Namespace) -> None:
    """``--work-dir``, else the config's, else ./work_dirs/<config name>."""
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])


def build_runner(cfg: Config) -> Runner:
    """The config's ``runner_type`` (mocoplug.MoCoRunner), else Runner."""
    return RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)


def merge_args(cfg: Config, args: argparse.Namespace) -> Config:
    """Merge the command-line arguments into the config."""
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    cfg.launcher = args.launcher
    set_work_dir(cfg, args)
    if args.amp:
        import torch
        if torch.cuda.is_available():
            cfg.optim_wrapper.type = 'AmpOptimWrapper'
            cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
        else:  # mmengine's AmpOptimWrapper needs a GPU: bfloat16 on CPU
            cfg.optim_wrapper.type = 'mocoplug.BF16OptimWrapper'
            cfg.optim_wrapper.pop('loss_scale', None)
    if args.resume is not None:
        cfg.resume = True
        cfg.load_from = None if args.resume == 'auto' else args.resume
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg:
            raise ValueError('--auto-scale-lr needs `auto_scale_lr = dict('
                             'base_batch_size=...)` in the config')
        cfg.auto_scale_lr.enable = True

    # mmpretrain's defaults; persistent workers only where there are workers
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if cfg.get(field, None) is None:
            continue
        loader = ConfigDict(pin_memory=True, persistent_workers=True)
        loader.update(cfg[field])
        if args.no_pin_memory:
            loader.pin_memory = False
        if args.no_persistent_workers or loader.get('num_workers', 0) == 0:
            loader.persistent_workers = False
        cfg[field] = loader

    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    return cfg


def main(argv=None):
    args = parse_args(argv)
    runner = build_runner(merge_args(Config.fromfile(args.config), args))
    runner.train()
    return runner


if __name__ == '__main__':
    main()
