# Copyright (c) mocoplug contributors. All rights reserved.
import os

import pytest
from mmengine.config import Config

CONFIG = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    'configs', 'mocov2_r50_8xb32-coslr-200e_in1k.py')


def merged(load_tool, *argv):
    train = load_tool('train')
    args = train.parse_args([CONFIG, *argv])
    return train.merge_args(Config.fromfile(CONFIG), args)


def test_defaults(load_tool):
    cfg = merged(load_tool)
    assert cfg.work_dir == os.path.join('./work_dirs',
                                        'mocov2_r50_8xb32-coslr-200e_in1k')
    assert cfg.launcher == 'none'
    assert cfg.train_dataloader.pin_memory is True
    assert cfg.train_dataloader.persistent_workers is True  # 8 workers


def test_amp_picks_float16_on_gpu_and_bfloat16_on_cpu(load_tool, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    cfg = merged(load_tool, '--amp')
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper'
    assert cfg.optim_wrapper.loss_scale == 'dynamic'
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    cfg = merged(load_tool, '--amp')
    # mmengine's AmpOptimWrapper asserts a GPU; bf16 needs no loss scale
    assert cfg.optim_wrapper.type == 'mocoplug.BF16OptimWrapper'
    assert 'loss_scale' not in cfg.optim_wrapper


def test_amp_resume_and_cfg_options(load_tool):
    cfg = merged(load_tool, '--amp', '--resume', '--work-dir', 'w',
                 '--cfg-options', 'model.shuffle_bn=split',
                 'train_dataloader.num_workers=0')
    assert cfg.optim_wrapper.type in ('AmpOptimWrapper',
                                      'mocoplug.BF16OptimWrapper')
    assert cfg.resume is True and cfg.load_from is None
    assert cfg.work_dir == 'w'
    assert cfg.model.shuffle_bn == 'split'
    cfg = merged(load_tool, '--resume', 'ckpt.pth')
    assert cfg.resume is True and cfg.load_from == 'ckpt.pth'


def test_auto_scale_lr(load_tool):
    assert merged(load_tool, '--auto-scale-lr').auto_scale_lr == dict(
        base_batch_size=256, enable=True)


def test_pretrained_option_needs_a_receiving_init_cfg(load_tool):
    with pytest.raises(ValueError, match="mocoplug's Pretrained"):
        merged(load_tool, '--cfg-options', 'pretrained=x.pth')


def test_none_switches_off_mocoplug_default_hooks(load_tool):
    """mmengine 0.10.7 asserts on ``default_hooks.NAME=None`` for names that
    are not its own; tools/train.py drops them, and the Runner accepts the
    result (mmengine's own names still reach mmengine)."""
    from mmengine.runner import Runner
    from mmengine.visualization import Visualizer
    Visualizer.get_instance('test_none_switches_off')  # LoggerHook needs one
    cfg = merged(load_tool, '--cfg-options',
                 'default_hooks.exact_resume=None',
                 'default_hooks.representation_health=None',
                 'default_hooks.checkpoint=None')
    assert 'exact_resume' not in cfg.default_hooks
    assert 'representation_health' not in cfg.default_hooks
    assert {'non_finite_loss', 'moco_config_check'} <= set(cfg.default_hooks)
    assert cfg.default_hooks.checkpoint is None  # mmengine's own: kept
    from mmengine.registry import DefaultScope
    runner = Runner.__new__(Runner)
    runner._hooks = []
    with DefaultScope.overwrite_default_scope('mocoplug'):
        runner.register_default_hooks(cfg.default_hooks)
    names = {type(h).__name__ for h in runner.hooks}
    assert 'ExactResumeHook' not in names
    assert 'RepresentationHealthHook' not in names
    assert 'CheckpointHook' not in names
    assert {'NonFiniteLossHook', 'MoCoConfigCheckHook'} <= names
    # without the fix mmengine refuses the config
    with pytest.raises(AssertionError):
        Runner.__new__(Runner).register_default_hooks(
            dict(exact_resume=None))


def test_cpu_ddp_does_not_broadcast_buffers(load_tool, monkeypatch):
    """Broadcasting buffers would send MoCo's whole K x C queue from rank 0
    to every rank at each forward; mmengine's GPU default is off too."""
    import torch
    import torch.distributed as dist
    train = load_tool('train')
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(dist, 'is_initialized', lambda: False)
    monkeypatch.setattr(dist, 'init_process_group', lambda backend: None)
    monkeypatch.setattr(dist, 'get_rank', lambda: 0)
    monkeypatch.setattr(dist, 'get_world_size', lambda: 2)
    cfg = merged(load_tool, '--launcher', 'pytorch')
    train.setup_cpu_distributed(cfg)
    assert cfg.model_wrapper_cfg == dict(
        device_ids=None,
        type='MMDistributedDataParallel',
        broadcast_buffers=False)
