# Copyright (c) mocoplug contributors. All rights reserved.
"""The multiband folder config: 4-band 16-bit TIFFs and 16-bit grayscale
PNGs reach the model with every band and their bit depth, through
tools/train.py and mmpretrain's own tools/train.py; band_stats.py gives
the statistics it needs."""
import numpy as np
import pytest
import torch

from ..conftest import unique_experiment_name
from ..engine.runner.test_run_checks import runner_for, write_band_images
from ..packaged_tools import run_packaged_tool
from .conftest import config_path

MULTIBAND = config_path(
    'mocov2/mocov2_smallconv4-w32_1xb64-coslr-15e_multiband-folder.py')


def write_stepped_tiffs(folder, count=16):
    """4 bands of 16 bits, band b around 10000 x (b + 1) (+- 2000)."""
    import tifffile
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for i in range(count):
        img = 10000 * np.arange(1, 5) + rng.integers(-2000, 2000, (40, 40, 4))
        tifffile.imwrite(folder / f'{i}.tif', img.astype(np.uint16))


def options(tmp_path, folder, stats):
    mean, std, (bands, _) = stats
    return [
        f'train_dataloader.dataset.data_root={folder}',
        'train_dataloader.batch_size=8', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False', 'model.queue.size=16',
        'train_cfg.max_epochs=1', 'default_hooks.representation_health=None',
        'data_preprocessor.mean=[' + ','.join(map(str, mean)) + ']',
        'data_preprocessor.std=[' + ','.join(map(str, std)) + ']',
        f'model.backbone.in_channels={bands}',
        f'experiment_name={unique_experiment_name(tmp_path)}'
    ]


def capture_inputs(runner):
    """The batches the model's encoders get, de-normalised to the files'
    values (mean and std of the preprocessor put back)."""
    seen, model = [], runner.model
    pre = model.data_preprocessor
    original = pre.forward

    def forward(data, training=False):
        out = original(data, training)
        for view in out['inputs']:
            seen.append(view.detach() * pre.std + pre.mean)
        return out

    pre.forward = forward
    return seen


@pytest.mark.parametrize('kind', ['tiff', 'png16'])
def test_every_band_and_bit_reaches_the_model(load_tool, tmp_path, kind):
    folder = tmp_path / 'images'
    if kind == 'tiff':
        write_stepped_tiffs(folder)
    else:
        write_band_images(folder, 'png16', 16)
    stats = load_tool('analysis_tools/band_stats').band_stats(
        sorted(str(p) for p in folder.iterdir()))
    argv = options(tmp_path, folder, stats)
    if kind == 'png16':
        argv.append('train_dataloader.dataset.pipeline.0.imdecode_backend='
                    'cv2')
    runner = runner_for(load_tool, MULTIBAND, tmp_path / 'work', *argv)
    seen = capture_inputs(runner)
    runner.train()
    assert runner.iter == 2  # 16 images, batch 8
    views = torch.cat(seen)
    bands = 4 if kind == 'tiff' else 1
    assert views.shape[1:] == (bands, 32, 32)
    # brightness and contrast scale every band alike (x0.6 .. x1.4): the
    # bands keep their order and their 16-bit values, unless the band-mean
    # grayscale (p = 0.2) made them one
    assert views.max() > 255
    if kind == 'tiff':
        steps = views.mean((2, 3)).diff(dim=1)
        ordered = (steps > 1000).all(1)
        gray = (steps.abs() < 1).all(1)
        assert (ordered | gray).all() and ordered.sum() > len(views) / 2


def test_band_stats_are_the_files_own(load_tool, tmp_path):
    folder = tmp_path / 'images'
    write_stepped_tiffs(folder, 3)
    import tifffile
    pixels = np.concatenate([
        tifffile.imread(p).reshape(-1, 4) for p in sorted(folder.iterdir())
    ]).astype(np.float64)
    mean, std = load_tool('analysis_tools/band_stats').main([str(folder)])
    np.testing.assert_allclose(mean, pixels.mean(0), rtol=1e-12)
    np.testing.assert_allclose(std, pixels.std(0), rtol=1e-9)


def test_the_multiband_config_through_mmpretrains_train_tool(
        load_tool, tmp_path, monkeypatch):
    folder = tmp_path / 'images'
    write_stepped_tiffs(folder)
    stats = load_tool('analysis_tools/band_stats').band_stats(
        sorted(str(p) for p in folder.iterdir()))
    runners = run_packaged_tool(monkeypatch, 'mmpretrain', 'train', [
        MULTIBAND, '--work-dir',
        str(tmp_path / 'work'), '--cfg-options',
        *options(tmp_path, folder, stats)
    ])
    assert runners[-1].iter == 2
    stem = runners[-1].model.backbone.layers[0].weight
    assert stem.shape[1] == 4
