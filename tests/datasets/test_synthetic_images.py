# Copyright (c) mocoplug contributors. All rights reserved.
import cv2
import numpy as np
import pytest

from mocoplug.datasets import SyntheticImageDataset


def test_images_are_coarse_colour_grids_the_same_every_time():
    data = SyntheticImageDataset(num_images=3, img_size=32, grid=4)
    assert len(data) == 3
    img = data[1]['img']
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    assert np.array_equal(img, SyntheticImageDataset(3, 32, 4)[1]['img'])
    assert not np.array_equal(img, data[2]['img'])
    # a 4 x 4 grid of colours drawn from (seed, index), enlarged
    # bilinearly, plus noise in [-8, 8]
    rng = np.random.default_rng([0, 1])
    cells = rng.integers(0, 256, (4, 4, 3), np.uint8)
    smooth = cv2.resize(cells, (32, 32), interpolation=cv2.INTER_LINEAR)
    noise = img.astype(int) - smooth.astype(int)
    assert np.abs(noise).max() <= 8 and noise.std() > 2
    # another seed, other images
    other = SyntheticImageDataset(num_images=3, img_size=32, seed=1)
    assert not np.array_equal(img, other[1]['img'])


def test_labels_and_pipeline():
    data = SyntheticImageDataset(
        num_images=5,
        img_size=16,
        num_classes=2,
        with_label=True,
        pipeline=[dict(type='PackInputs')])
    assert data.metainfo['classes'] == ('0', '1') or \
        list(data.metainfo['classes']) == ['0', '1']
    sample = data[3]
    assert int(sample['data_samples'].gt_label) == 1
    assert sample['inputs'].shape == (3, 16, 16)
    assert 'gt_label' not in SyntheticImageDataset(2, 8)[0]


def test_bad_sizes_name_the_field():
    with pytest.raises(ValueError, match='num_images'):
        SyntheticImageDataset(num_images=0)
    with pytest.raises(ValueError, match='img_size'):
        SyntheticImageDataset(num_images=2, img_size=2.5)
