# Copyright (c) mocoplug contributors. All rights reserved.
import re

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import mocoplug.datasets.transforms.checked_load_image as checked
from mocoplug.datasets import UnreadableImageError
from mocoplug.registry import DATASETS, TRANSFORMS
from ..configs.conftest import config_path, shrink_crops
from .image_files import BROKEN, write_images

CANNOT_DECODE = ('cv2 cannot decode it (not an image, or a truncated or '
                 'corrupt one; {} bytes)')
REASONS = {
    'empty.jpg': 'the file is empty (0 bytes)',
    'truncated.jpg': CANNOT_DECODE.format(300),
    'text.jpg': CANNOT_DECODE.format(34),
    'zero_size.png': CANNOT_DECODE.format(45),
}


@pytest.fixture(scope='module')
def folder_dataset_cfg():
    """The folder config's dataset as shipped, its crops at 16 px."""
    cfg = Config.fromfile(
        config_path('mocov2/mocov2_r50_8xb32-coslr-200e_folder.py'))
    dataset = cfg.train_dataloader.dataset.to_dict()
    dataset['pipeline'] = shrink_crops(dataset['pipeline'], 16)
    return dataset


def build(dataset_cfg, root, **load_args):
    init_default_scope('mocoplug')
    cfg = dict(dataset_cfg, data_root=str(root))
    cfg['pipeline'] = [dict(cfg['pipeline'][0], **load_args)
                       ] + cfg['pipeline'][1:]
    dataset = DATASETS.build(cfg)
    return dataset, dataset.pipeline.transforms[0]


def index_of(dataset, path):
    paths = [dataset.get_data_info(i)['img_path'] for i in range(len(dataset))]
    return paths.index(str(path))


def test_folder_config_loads_with_the_checked_loader(folder_dataset_cfg,
                                                     tmp_path):
    files = write_images(tmp_path, num_good=2)
    dataset, load = build(folder_dataset_cfg, tmp_path)
    assert type(load).__name__ == 'CheckedLoadImageFromFile'
    assert folder_dataset_cfg['pipeline'][0]['type'] == \
        'mocoplug.CheckedLoadImageFromFile'
    assert load.skip_unreadable is False and load.max_unreadable_ratio == 0.01
    sample = dataset[index_of(dataset, files['good_0.jpg'])]
    assert [v.shape for v in sample['inputs']] == [(3, 16, 16)] * 2
    assert sample['data_samples'].img_path == str(files['good_0.jpg'])


@pytest.mark.parametrize('name', BROKEN)
def test_unreadable_image_is_a_clear_error(folder_dataset_cfg, tmp_path, name):
    files = write_images(tmp_path, num_good=2)
    dataset, _ = build(folder_dataset_cfg, tmp_path)
    with pytest.raises(UnreadableImageError) as err:
        dataset[index_of(dataset, files[name])]
    msg = str(err.value)
    assert f"Cannot load image '{files[name]}': {REASONS[name]}." in msg
    assert (f"Dataset: CustomDataset(data_root='{tmp_path}', 6 images)" in msg)
    assert f'tools/misc/check_images.py {tmp_path} --out bad.txt' in msg
    assert ('train_dataloader.dataset.pipeline.0.skip_unreadable=True' in msg)


def test_error_keeps_its_type_and_message_through_a_worker(
        folder_dataset_cfg, tmp_path):
    files = write_images(tmp_path, num_good=0)
    dataset, _ = build(folder_dataset_cfg, tmp_path)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=1, num_workers=1, collate_fn=lambda x: x)
    with pytest.raises(UnreadableImageError, match='Cannot load image') as e:
        next(iter(loader))
    assert str(files['empty.jpg']) in str(e.value)  # the first, sorted


def test_skip_mode_refetches_and_counts(folder_dataset_cfg, tmp_path,
                                        monkeypatch):
    files = write_images(tmp_path, num_good=6)
    warnings = []
    monkeypatch.setattr(checked, 'print_log',
                        lambda msg, **kw: warnings.append((msg, kw)))
    dataset, load = build(
        folder_dataset_cfg,
        tmp_path,
        skip_unreadable=True,
        max_unreadable_ratio=0.9,
        min_attempts=1)
    np.random.seed(0)  # BaseDataset refetches a random index
    paths = [dataset[i]['data_samples'].img_path for i in range(len(dataset))]
    good = {
        str(files[f'good_{i}.{"png" if i % 2 else "jpg"}'])
        for i in range(6)
    }
    assert set(paths) <= good  # every sample is a readable image
    broken = {str(files[n]) for n in BROKEN}
    assert broken <= set(load.unreadable) and set(load.unreadable) <= broken
    # one attempt per index plus one per refetch
    assert load.num_attempts == len(dataset) + len(load.unreadable)
    assert len(warnings) == len(load.unreadable)
    for n, (msg, kw) in enumerate(warnings, 1):
        assert kw['level'] == 30 and load.unreadable[n - 1] in msg
        assert re.search(
            rf'Unreadable so far in this worker: {n} of \d+ '
            'loads', msg)


def test_skip_mode_stops_above_the_ratio(folder_dataset_cfg, tmp_path,
                                         monkeypatch):
    write_images(tmp_path, num_good=2)  # 4 of 6 files are broken
    monkeypatch.setattr(checked, 'print_log', lambda *a, **k: None)
    dataset, load = build(
        folder_dataset_cfg,
        tmp_path,
        skip_unreadable=True,
        max_unreadable_ratio=0.25,
        min_attempts=4)
    np.random.seed(0)
    with pytest.raises(UnreadableImageError) as err:
        for i in range(len(dataset)):
            dataset[i]
    msg = str(err.value)
    pattern = (r'(\d+) of the (\d+) images this dataloader worker loaded '
               r'could not be read')
    failed, tried = map(int, re.search(pattern, msg).groups())
    assert (failed, tried) == (len(load.unreadable), load.num_attempts)
    assert tried >= 4 and failed > 0.25 * tried
    assert 'more than max_unreadable_ratio=0.25' in msg
    assert f"CustomDataset(data_root='{tmp_path}', 6 images)" in msg
    assert load.unreadable[0] in msg


def test_ratio_is_checked_from_min_attempts_on(tmp_path, monkeypatch):
    files = write_images(tmp_path, num_good=3)
    monkeypatch.setattr(checked, 'print_log', lambda *a, **k: None)
    init_default_scope('mocoplug')
    load = TRANSFORMS.build(
        dict(
            type='CheckedLoadImageFromFile',
            skip_unreadable=True,
            max_unreadable_ratio=0.25,
            min_attempts=4))
    order = ['good_0.jpg', 'empty.jpg', 'good_1.png', 'good_2.jpg']
    out = [load(dict(img_path=str(files[n]))) for n in order]
    # 1 of 2 failed at the 2nd load, but the ratio waits for 4 loads
    assert out[1] is None and all(o is not None for o in out[::2])
    assert out[3]['img'].shape == (24, 24, 3)
    # 5th load: 2 of 5 failed > 0.25
    with pytest.raises(
            UnreadableImageError,
            match=r'2 of the 5 images .*'
            r'\(40.0%\), more than max_unreadable_ratio=0.25'):
        load(dict(img_path=str(files['text.jpg'])))


def test_refuses_silent_options():
    init_default_scope('mocoplug')
    with pytest.raises(ValueError, match='use skip_unreadable=True'):
        TRANSFORMS.build(
            dict(type='CheckedLoadImageFromFile', ignore_empty=True))
    with pytest.raises(ValueError, match=r'in \[0, 1\)'):
        TRANSFORMS.build(
            dict(type='CheckedLoadImageFromFile', max_unreadable_ratio=1))
