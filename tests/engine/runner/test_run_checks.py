# Copyright (c) mocoplug contributors. All rights reserved.
"""A run that cannot train is refused before its first step
(mocoplug/engine/runner/run_checks.py), through tools/train.py's way of
building the runner (MoCoRunner, the config's runner_type)."""
import os.path as osp
import time

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import RUNNERS

from mocoplug.engine.runner.run_checks import check_data_roots
from mocoplug.registry import MODELS
from ...conftest import unique_experiment_name

ROOT = osp.dirname(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
DIGITS = osp.join(
    ROOT, 'configs',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
V3 = osp.join(ROOT, 'configs',
              'mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py')
README_CONFIG = osp.join(ROOT, 'configs', 'mocov2_r50_8xb32.py')


def runner_for(load_tool, config, work_dir, *options, edit=None):
    train = load_tool('train')
    argv = [config, '--work-dir', str(work_dir)]
    if options:
        argv += ['--cfg-options', *options]
    cfg = train.merge_args(Config.fromfile(config), train.parse_args(argv))
    cfg.log_level = 'WARNING'
    cfg.experiment_name = unique_experiment_name(work_dir)
    if edit is not None:
        edit(cfg)
    return train.build_runner(cfg)


def test_continued_pretraining_on_a_folder_below_one_batch_is_refused(
        load_tool, tmp_path):
    """README's small-folder path: encoders_from with fewer images than a
    batch used to wait forever in the queue refill."""
    cfg = Config.fromfile(DIGITS)
    model = MODELS.build(cfg.model)
    torch.save(dict(state_dict=model.state_dict()), tmp_path / 'moco.pth')
    started = time.monotonic()
    runner = runner_for(load_tool, DIGITS, tmp_path,
                        'train_dataloader.dataset.indices=32',
                        f'model.encoders_from={tmp_path / "moco.pth"}')
    with pytest.raises(ValueError) as error:
        runner.train()
    assert time.monotonic() - started < 60
    assert str(error.value).startswith(
        'train_dataloader yields no batch: 32 images over 1 process(es), '
        '32 a process, fewer than train_dataloader.batch_size=64 with '
        'drop_last=True')
    assert 'batch_size of at most 32 a process, fewer processes, or at ' \
           'least 64 images' in str(error.value)
    assert not list(tmp_path.glob('*.pth'))[1:]  # only the released one


def test_from_scratch_the_same_folder_is_refused_not_trained_for_0_steps(
        load_tool, tmp_path):
    runner = runner_for(load_tool, DIGITS, tmp_path,
                        'train_dataloader.dataset.indices=32')
    with pytest.raises(ValueError, match='yields no batch: 32 images'):
        runner.train()
    assert not list(tmp_path.glob('*.pth'))  # no epoch_1.pth of init


def test_moco_v3_names_the_cause_not_the_scheduler(load_tool, tmp_path,
                                                   image_folder):
    """mmengine's 'end should be larger than begin' came from the warm-up
    of a schedule over 0 iterations an epoch."""

    def on_the_folder(cfg):
        cfg.train_dataloader.dataset = dict(
            type='CustomDataset',
            data_root=image_folder,
            with_label=False,
            pipeline=cfg.train_dataloader.dataset.pipeline)

    runner = runner_for(
        load_tool,
        V3,
        tmp_path,
        'train_dataloader.num_workers=0',
        'train_dataloader.drop_last=True',
        'model.backbone.depth=18',
        'model.neck.in_channels=512',
        edit=on_the_folder)
    with pytest.raises(
            ValueError,
            match='yields no batch: 16 images over 1 '
            r'process\(es\), 16 a process, fewer than '
            'train_dataloader.batch_size=512'):
        runner.train()


def test_an_iteration_loop_over_an_infinite_sampler_trains_few_images(
        tiny_moco_runner_cfg, tmp_path):
    """InfiniteSampler fills every batch from fewer images: not refused."""
    cfg = tiny_moco_runner_cfg(tmp_path, max_iters=2)
    cfg.train_dataloader.dataset.indices = 4  # batch 8
    cfg.train_dataloader.sampler = dict(type='InfiniteSampler')
    runner = RUNNERS.build(dict(cfg, runner_type='mocoplug.MoCoRunner'))
    runner.train()
    assert runner.iter == 2


def test_an_iteration_loop_over_no_batch_is_refused(tiny_moco_runner_cfg,
                                                    tmp_path):
    """IterBasedTrainLoop re-iterates an empty DefaultSampler loader
    forever."""
    cfg = tiny_moco_runner_cfg(tmp_path, max_iters=2)
    cfg.train_dataloader.dataset.indices = 4
    cfg.train_dataloader.drop_last = True
    runner = RUNNERS.build(dict(cfg, runner_type='mocoplug.MoCoRunner'))
    with pytest.raises(ValueError, match='yields no batch: 4 images'):
        runner.train()


def test_zero_iterations_are_refused(load_tool, tmp_path):
    runner = runner_for(load_tool, DIGITS, tmp_path, 'train_cfg.max_epochs=0',
                        'param_scheduler.0.T_max=1', 'param_scheduler.0.end=1')
    with pytest.raises(ValueError, match='train_cfg gives 0 iterations'):
        runner.train()


def test_readme_config_without_imagenet_names_the_field(
        load_tool, tmp_path, monkeypatch):
    """`python tools/train.py configs/mocov2_r50_8xb32.py` with no ImageNet
    under data/: a FileNotFoundError from os.scandir before."""
    monkeypatch.chdir(tmp_path)
    runner = runner_for(load_tool, README_CONFIG, tmp_path,
                        'model.shuffle_bn=split')
    with pytest.raises(FileNotFoundError) as error:
        runner.train()
    assert str(error.value).startswith(
        "train_dataloader.dataset.data_root='data/imagenet/' (data_prefix "
        "'train'): the folder 'data/imagenet/train' does not exist. Set "
        "train_dataloader.dataset.data_root to ImageNet's: "
        'DATA_ROOT/train/n01440764/*.JPEG')


def test_data_roots_missing_or_without_images(tmp_path):
    loader = dict(dataset=dict(type='CustomDataset', data_root=str(tmp_path)))
    with pytest.raises(ValueError, match=f"{tmp_path}/?' holds no file of"):
        check_data_roots(loader)
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'x.png').write_bytes(b'')
    check_data_roots(loader)  # an image, however deep
    wrapped = dict(
        dataset=dict(
            type='RepeatDataset',
            dataset=dict(data_root=str(tmp_path / 'no'), data_prefix='x')))
    with pytest.raises(
            FileNotFoundError,
            match=r"train_dataloader.dataset.data_root='.*/no' \(data_prefix "
            r"'x'\): the folder '.*/no/x' does not exist"):
        check_data_roots(wrapped)
    check_data_roots(dict(dataset=dict(data_root='s3://bucket/images')))


def test_what_the_data_root_check_leaves_to_the_dataset(tmp_path):
    """A split that names a list, not a folder (CIFAR, MNIST, with their
    downloads), and the dataset's own extensions."""
    check_data_roots(
        dict(
            dataset=dict(
                type='CIFAR10', data_root=str(tmp_path /
                                              'no'), split='train')))
    (tmp_path / 'x.npy').write_bytes(b'')
    check_data_roots(
        dict(
            dataset=dict(
                type='CustomDataset',
                data_root=str(tmp_path),
                extensions=('.npy', ))))


def test_a_batch_sampler_gives_the_batch_size():
    """mmdet's configs batch with AspectRatioBatchSampler: the loader's
    batch_size is None (auto_scale_lr multiplied it)."""
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    from mocoplug.engine.hooks.runner_info import loader_batch_size
    data = list(range(10))
    loader = DataLoader(
        data, batch_sampler=BatchSampler(SequentialSampler(data), 4, False))
    assert loader.batch_size is None and loader_batch_size(loader) == 4
