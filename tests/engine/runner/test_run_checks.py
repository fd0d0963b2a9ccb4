# Copyright (c) mocoplug contributors. All rights reserved.
"""A run that cannot train is refused before its first step
(mocoplug/engine/runner/run_checks.py), through tools/train.py's way of
building the runner (MoCoRunner, the config's runner_type)."""
import os.path as osp
import time

import numpy as np
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


FOLDER = osp.join(
    ROOT, 'configs',
    'mocov2/mocov2_smallconv4-w32_1xb64-coslr-15e_digits-folder.py')


def write_band_images(folder, kind: str, count: int = 4) -> list:
    """``count`` files of one kind: 'tiff4x16' (4 bands, 16 bits, written
    by tifffile), 'png16' (16-bit grayscale), 'png8' (8-bit grayscale),
    'jpg' (8-bit RGB)."""
    import cv2
    import tifffile
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        suffix = 'tif' if kind.startswith('tiff') else kind[:3]
        path = folder / f'{kind}_{i}.{suffix}'
        if kind == 'tiff4x16':
            tifffile.imwrite(
                path, rng.integers(0, 65536, (32, 32, 4), dtype=np.uint16))
        elif kind == 'png16':
            cv2.imwrite(
                str(path), rng.integers(0, 65536, (32, 32), dtype=np.uint16))
        elif kind == 'png8':
            cv2.imwrite(
                str(path), rng.integers(0, 256, (32, 32), dtype=np.uint8))
        else:
            cv2.imwrite(
                str(path), rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
        paths.append(path)
    return paths


@pytest.mark.parametrize('kind,held,lost', [
    ('tiff4x16', '4 band(s) of 16 bits',
     'bands would be dropped and values cut to 8 bits'),
    ('png16', '1 band(s) of 16 bits', 'values cut to 8 bits'),
])
def test_bands_or_bits_the_loader_drops_are_refused_before_training(
        load_tool, tmp_path, kind, held, lost):
    """The folder config on 4-band 16-bit TIFFs or 16-bit grayscale PNGs:
    cv2's colour decode would give 3 bands of 8 bits; refused before a
    step, through tools/train.py."""
    write_band_images(tmp_path / 'images', kind)
    runner = runner_for(
        load_tool, FOLDER, tmp_path / 'work',
        f'train_dataloader.dataset.data_root='
        f'{tmp_path / "images"}')
    with pytest.raises(ValueError) as error:
        runner.train()
    text = str(error.value)
    assert text.startswith(f'train_dataloader.dataset: the images hold {held}'
                           f' (e.g. {kind}_0.')
    assert ("but train_dataloader.dataset.pipeline.0 "
            "(CheckedLoadImageFromFile, color_type='color', "
            "imdecode_backend='cv2') decodes 3 band(s) of 8 bits: "
            f'{lost}. Nothing is converted silently') in text
    assert not list((tmp_path / 'work').glob('*.pth'))


def test_16_bit_pngs_are_refused_through_mmpretrains_train_tool(
        tmp_path, monkeypatch):
    from ...packaged_tools import run_packaged_tool
    write_band_images(tmp_path / 'images', 'png16')
    with pytest.raises(ValueError, match='1 band.s. of 16 bits'):
        run_packaged_tool(monkeypatch, 'mmpretrain', 'train', [
            FOLDER, '--work-dir',
            str(tmp_path / 'work'), '--cfg-options',
            f'train_dataloader.dataset.data_root={tmp_path / "images"}',
            f'experiment_name={unique_experiment_name(tmp_path)}'
        ])


def loop_over(folder, steps=(), bands=3, **loader):
    """A stand-in train loop: the folder as CustomDataset with mocoplug's
    checked loader (``loader`` its options), a model taking ``bands``."""
    from types import SimpleNamespace

    from mmpretrain.datasets import CustomDataset
    model = torch.nn.Sequential(torch.nn.Conv2d(bands, 4, 3))
    dataset = CustomDataset(
        data_root=str(folder),
        with_label=False,
        pipeline=[dict(type='mocoplug.CheckedLoadImageFromFile', **loader)] +
        list(steps))
    return SimpleNamespace(
        dataloader=SimpleNamespace(dataset=dataset),
        runner=SimpleNamespace(model=model))


def test_what_the_band_check_lets_through_and_says(tmp_path, monkeypatch):
    from mocoplug.engine.runner import run_checks
    logged = []
    monkeypatch.setattr(run_checks, 'print_log',
                        lambda msg, *a, **k: logged.append(msg))
    rgb = tmp_path / 'rgb'
    write_band_images(rgb, 'jpg')
    run_checks.check_bands(loop_over(rgb))  # 8-bit RGB: as before, silent
    assert logged == []
    mixed = tmp_path / 'mixed'
    write_band_images(mixed, 'jpg')
    write_band_images(mixed, 'png8')
    (mixed / 'broken.png').write_bytes(b'not an image')  # the loader's
    run_checks.check_bands(loop_over(mixed))
    assert len(logged) == 1 and logged[0].startswith(
        'the images hold 1 band(s) of 8 bits (e.g. png8_0.png, png8_1.png, '
        'png8_2.png)') and 'decodes them as 3 equal channels' in logged[0]
    # the loader keeps the files' bands and bits: one kind of file, and a
    # warning that the augmentations are checked for 8-bit RGB only
    with pytest.raises(ValueError, match='differ in bands or bit depth'):
        run_checks.check_bands(loop_over(mixed, color_type='unchanged'))
    tiff = tmp_path / 'tiff'
    write_band_images(tiff, 'tiff4x16')
    kept = dict(color_type='unchanged', imdecode_backend='tifffile')
    run_checks.check_bands(loop_over(tiff, bands=4, **kept))
    assert 'kept by' in logged[-1] and 'reach the model' in logged[-1]
    with pytest.raises(
            ValueError,
            match=r'hold 4 band.s., the model takes '
            r'\[3\] \(model.backbone.in_channels 3'):
        run_checks.check_bands(loop_over(tiff, bands=3, **kept))
    import tifffile
    planar = tmp_path / 'planar'
    planar.mkdir()
    tifffile.imwrite(planar / 'p.tif', np.zeros((4, 8, 9), np.uint16))
    with pytest.raises(ValueError, match='stores its bands before its rows'):
        run_checks.check_bands(loop_over(planar, bands=4, **kept))
    with pytest.raises(ValueError, match=r'steps for 8-bit RGB \(ColorJi'):
        run_checks.check_bands(
            loop_over(
                tiff, [dict(type='mocoplug.FastColorJitter', brightness=0.4)],
                color_type='unchanged',
                imdecode_backend='tifffile'))


def test_file_format_reads_the_headers(tmp_path):
    from PIL import Image

    from mocoplug.datasets.image_check import file_format
    for kind, expected in (('tiff4x16', (4, 16)), ('png16', (1, 16)),
                           ('png8', (1, 8)), ('jpg', (3, 8))):
        path, = write_band_images(tmp_path, kind, 1)
        assert file_format(str(path)) == expected, kind
    rng = np.random.default_rng(1)
    import cv2
    cv2.imwrite(
        str(tmp_path / 'rgb16.png'),
        rng.integers(0, 65536, (8, 8, 3), dtype=np.uint16))
    Image.fromarray(rng.integers(0, 256, (8, 8, 4),
                                 dtype=np.uint8)).save(tmp_path / 'rgba.png')
    Image.fromarray(rng.integers(0, 256, (8, 8, 3),
                                 dtype=np.uint8)).convert('P').save(
                                     tmp_path / 'palette.png')
    assert file_format(str(tmp_path / 'rgb16.png')) == (3, 16)  # PIL: 8
    assert file_format(str(tmp_path / 'rgba.png')) == (3, 8)  # alpha: none
    assert file_format(str(tmp_path / 'palette.png')) == (3, 8)
    # 8-bit RGBA, CMYK and palette TIFFs: 3 bands to cv2's colour decode
    # (trained before the check, not refused by it)
    import tifffile
    pixels = rng.integers(0, 256, (8, 8, 4), dtype=np.uint8)
    tifffile.imwrite(
        tmp_path / 'rgba.tif',
        pixels,
        photometric='rgb',
        extrasamples=['unassalpha'])
    tifffile.imwrite(tmp_path / 'cmyk.tif', pixels, photometric='separated')
    tifffile.imwrite(
        tmp_path / 'palette.tif',
        pixels[..., 0],
        photometric='palette',
        colormap=rng.integers(0, 65536, (3, 256), dtype=np.uint16))
    for name in ('rgba', 'cmyk', 'palette'):
        assert file_format(str(tmp_path / f'{name}.tif')) == (3, 8), name
    # beyond 8 bits an extra sample is a band (tifffile marks a 4th alpha)
    tifffile.imwrite(tmp_path / 'rgbn.tif', pixels.astype(np.uint16) * 257)
    assert file_format(str(tmp_path / 'rgbn.tif')) == (4, 16)
