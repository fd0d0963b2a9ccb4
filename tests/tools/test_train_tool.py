# Copyright (c) mocoplug contributors. All rights reserved.
import os

import pytest
from mmengine.config import Config

CONFIG = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    'configs', 'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py')


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


def test_pretrained_option_needs_a_receiving_init_cfg(load_tool, tmp_path):
    """The config's runner refuses a pretrained= that nothing would load,
    before it builds anything."""
    with pytest.raises(ValueError, match="mocoplug's Pretrained"):
        load_tool('train').main([
            CONFIG, '--work-dir',
            str(tmp_path), '--cfg-options', 'pretrained=x.pth'
        ])
    assert not list(tmp_path.iterdir())


def test_the_tool_leaves_config_semantics_to_the_runner(load_tool):
    """pretrained=, data_root=, default_hooks.NAME=None and the CPU launch
    are the runner's (tests/engine/runner): the tool only merges them."""
    cfg = merged(load_tool, '--cfg-options', 'pretrained=x.pth',
                 'default_hooks.exact_resume=None')
    assert cfg.runner_type == 'mocoplug.MoCoRunner'
    assert cfg.pretrained == 'x.pth'
    assert cfg.default_hooks.exact_resume is None
    assert 'model_wrapper_cfg' not in cfg
