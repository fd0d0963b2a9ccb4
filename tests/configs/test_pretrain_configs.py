# Copyright (c) mocoplug contributors. All rights reserved.
import os.path as osp

import mmpretrain
import pytest
from mmengine.config import Config
from mmengine.runner import Runner

import mocoplug.engine.hooks.moco_config_check_hook as check_hook
from .conftest import config_path, shrink_crops

PRETRAIN = [
    'mocov2_r50_8xb32.py',
    'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py',
    'mocov2/mocov2_r50_8xb32-coslr-800e_in1k.py',
    'mocov1/mocov1_r50_8xb32-steplr-200e_in1k.py',
    'mocov2/mocov2_r50_8xb32-coslr-200e_folder.py',
    'mocov2/mocov2_smallconv4-w32_1xb64-coslr-15e_digits-folder.py',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py',
]


def hook(cfg, type_):
    return next(h for h in cfg.custom_hooks if h['type'] == type_)


def test_mocov2_200e_recipe():
    cfg = Config.fromfile(config_path('mocov2_r50_8xb32.py'))
    assert cfg.default_scope == 'mocoplug'
    assert cfg.optim_wrapper.optimizer == dict(
        type='SGD', lr=0.03, momentum=0.9, weight_decay=1e-4, fused=True)
    assert cfg.param_scheduler[0].type == 'CosineAnnealingLR'
    assert cfg.param_scheduler[0].T_max == cfg.train_cfg.max_epochs == 200
    assert cfg.train_dataloader.batch_size == 32
    assert cfg.model.queue.size == 65536 and cfg.model.queue.dim == 128
    assert cfg.model.head.temperature == 0.2
    assert cfg.model.shuffle_bn == 'ddp'
    assert (cfg.model.neck.num_layers, cfg.model.neck.in_channels,
            cfg.model.neck.hid_channels,
            cfg.model.neck.out_channels) == (2, 2048, 2048, 128)
    assert hook(cfg, 'MomentumUpdateHook').momentum == 0.999
    views = cfg.train_dataloader.dataset.pipeline[1].transforms[0]
    assert 'mocoplug.FastGaussianBlur' in [v['type'] for v in views]
    assert Config.fromfile(
        config_path(
            'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py')).model == cfg.model


def test_mocov2_800e_and_mocov1_recipes():
    long = Config.fromfile(
        config_path('mocov2/mocov2_r50_8xb32-coslr-800e_in1k.py'))
    assert long.param_scheduler[0].T_max == long.train_cfg.max_epochs == 800
    v1 = Config.fromfile(
        config_path('mocov1/mocov1_r50_8xb32-steplr-200e_in1k.py'))
    assert v1.model.neck.num_layers == 1
    assert v1.model.head.temperature == 0.07
    assert v1.param_scheduler == [
        dict(
            type='MultiStepLR',
            by_epoch=True,
            milestones=[120, 160],
            gamma=0.1)
    ]
    views = v1.train_dataloader.dataset.pipeline[1].transforms[0]
    assert [v['type'] for v in views] == [
        'RandomResizedCrop', 'mocoplug.FastRandomGrayscale',
        'mocoplug.FastColorJitter', 'RandomFlip'
    ]
    assert hook(v1, 'MomentumUpdateHook').momentum == 0.999


def test_mocov2_views_are_mmpretrains_with_the_fast_transforms():
    """The restated MoCo v2 pipeline is mmpretrain's base pipeline, every
    parameter the same, with Fast* in place of three transforms."""
    base = Config.fromfile(
        osp.join(
            osp.dirname(mmpretrain.__file__), '.mim', 'configs', '_base_',
            'datasets', 'imagenet_bs32_mocov2.py')).train_pipeline
    fast = {
        'mocoplug.FastColorJitter', 'mocoplug.FastRandomGrayscale',
        'mocoplug.FastGaussianBlur'
    }

    def plain(obj):
        if isinstance(obj, (list, tuple)):
            return [plain(o) for o in obj]
        if not isinstance(obj, dict):
            return obj
        out = {k: plain(v) for k, v in obj.items() if k != '_scope_'}
        if out.get('type') in fast:
            out['type'] = out['type'][len('mocoplug.Fast'):]
        return out

    for name in ('mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py',
                 'mocov2/mocov2_r50_8xb32-coslr-800e_in1k.py',
                 'mocov2/mocov2_r50_8xb32-coslr-200e_folder.py'):
        ours = Config.fromfile(config_path(name)).train_dataloader
        ours = ours.dataset.pipeline
        loader = dict(ours[0])
        if name.endswith('_folder.py'):
            # the folder variant loads with the checked loader (issue 10)
            assert loader.pop('type') == 'mocoplug.CheckedLoadImageFromFile'
            assert loader.pop('skip_unreadable') is False
            assert loader.pop('max_unreadable_ratio') == 0.01
            loader['type'] = 'LoadImageFromFile'
        assert loader == dict(type='LoadImageFromFile', imdecode_backend='cv2')
        assert plain(ours[1:]) == plain(base[1:])
        assert {v['type'] for v in ours[1].transforms[0]} & fast


def test_folder_variant_reads_unlabelled_images():
    cfg = Config.fromfile(
        config_path('mocov2/mocov2_r50_8xb32-coslr-200e_folder.py'))
    assert cfg.train_dataloader.dataset.type == 'CustomDataset'
    assert cfg.train_dataloader.dataset.with_label is False


def test_folder_recipe_sets_what_depends_on_the_size_by_its_rules(
        tmp_path, tiny_data_cfg, monkeypatch):
    """The folder recipe at any size: a BN projection neck; lr 0.03 per 256
    images of batch, scaled when the run starts; before training, the
    config check logs the sizes and the lr and warns that 65536 keys are
    too many for 4 images."""
    name = 'mocov2/mocov2_r50_8xb32-coslr-200e_folder.py'
    neck = Config.fromfile(config_path(name)).model.neck
    assert (neck.with_bn, neck.with_last_bn, neck.with_last_bn_affine,
            neck.with_bias) == (True, True, False, False)
    logged = []
    monkeypatch.setattr(check_hook, 'print_log',
                        lambda msg, **kw: logged.append(msg))
    cfg = tiny_data_cfg(name, tmp_path)  # 4 images, batch 4
    cfg.train_cfg.max_epochs = 1
    cfg.model.shuffle_bn = 'split'
    cfg.model.num_splits = 2
    runner = Runner.from_cfg(cfg)
    runner.train()
    group = runner.optim_wrapper.optimizer.param_groups[0]
    assert group['initial_lr'] == pytest.approx(0.03 * 4 / 256)
    assert logged[:2] == [
        'MoCo: 4 training images, 1 iterations, queue 65536 (16384.0 keys '
        'per image), total batch 4, 1.0 epochs of 4 images, lr 0.00046875, '
        'from scratch.',
        'MoCo: the queue (65536 keys) holds 16384 keys of every one of the 4 '
        'training images, which are negatives of their own image: set '
        'model.queue.size to at most 4 x the number of images (16) or '
        'model.queue.exclude_same_instance=True.'
    ]
    assert len(logged) == 2


def test_digits_folder_recipe_is_the_folder_one_at_cpu_size():
    """Only the data root, the CPU sizes and the queue the rule gives for
    1258 images differ."""
    folder = Config.fromfile(
        config_path('mocov2/mocov2_r50_8xb32-coslr-200e_folder.py'))
    cpu = Config.fromfile(
        config_path(
            'mocov2/mocov2_smallconv4-w32_1xb64-coslr-15e_digits-folder.py'))
    assert cpu.model.backbone == dict(
        type='SmallConvNet', channels=(32, 64, 128, 256), pool_after=(0, 1, 2))
    assert dict(
        cpu.model.neck, in_channels=2048,
        hid_channels=2048) == folder.model.neck
    assert cpu.model.queue.size == 4096 <= 4 * 1258
    assert (cpu.model.shuffle_bn, cpu.model.num_splits) == ('split', 4)
    for key in ('head', 'type', 'data_preprocessor'):
        assert cpu.model.get(key) == folder.model.get(key)
    for key in ('optim_wrapper', 'auto_scale_lr', 'randomness'):
        assert cpu[key] == folder[key]
    loader = cpu.train_dataloader
    assert loader.dataset.data_root == 'data/digits/train'
    assert loader.dataset.pipeline == shrink_crops(
        folder.train_dataloader.dataset.pipeline, 32)
    assert (loader.batch_size, cpu.train_cfg.max_epochs) == (64, 15)
    assert cpu.custom_hooks == folder.custom_hooks  # m = 0.999


def test_digits_demo_recipe():
    """The recipe measured for the demo (see the config's table)."""
    cfg = Config.fromfile(config_path(PRETRAIN[-1]))
    assert cfg.model.backbone == dict(
        type='SmallConvNet', channels=(32, 64, 128, 256), pool_after=(0, 1, 2))
    assert cfg.model.neck.in_channels == 256
    assert cfg.optim_wrapper.optimizer.lr == 0.005
    assert cfg.model.head.temperature == 0.2
    assert cfg.model.queue.size == 4096
    assert cfg.param_scheduler[0].T_max == cfg.train_cfg.max_epochs == 15
    views = cfg.train_dataloader.dataset.pipeline[0].transforms[0]
    affine = next(v for v in views if v['type'] == 'torchvision/RandomAffine')
    # the ranges of the demo's perturbation
    assert (affine.degrees, affine.translate, affine.scale) == (20, (0.1, 0.1),
                                                                (0.8, 1.2))
    kinds = [v['type'] for v in views]
    assert not any('Flip' in k or 'Crop' in k for k in kinds)
