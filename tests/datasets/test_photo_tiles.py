# Copyright (c) mocoplug contributors. All rights reserved.
"""PhotoTilesDataset: tiles of real photographs, the held-out region never
in the pretraining tiles."""
import numpy as np
import pytest

from mocoplug.datasets import PhotoTilesDataset
from mocoplug.datasets.photo_tiles import PHOTOS, _load


def test_splits_come_from_disjoint_regions_and_are_labelled_by_photo():
    train = PhotoTilesDataset(split='train', num_tiles=120, seed=3)
    memory = PhotoTilesDataset(split='memory')
    test = PhotoTilesDataset(split='test')
    assert len(train) == 120
    assert {train[i]['gt_label'] for i in range(12)} == set(range(12))
    astronaut = _load(PHOTOS[0], 192)  # 192 x 192
    cut = int(round(192 * 0.75))  # 144
    left, right = astronaut[:, :cut], astronaut[:, cut:]
    # every tile is a crop of its photograph's own region
    for dataset, region in ((train, left), (memory, left), (test, right)):
        tiles = [
            d['img']
            for d in (dataset.get_data_info(i) for i in range(len(dataset)))
            if d['gt_label'] == 0
        ]
        assert tiles and all(t.shape == (32, 32, 3) for t in tiles)
        windows = np.lib.stride_tricks.sliding_window_view(
            region, (32, 32, 3))[..., 0, :, :, :]
        for t in tiles[:5]:
            assert (windows == t).all(axis=(-3, -2, -1)).any()
    # the grid: (192 - 32) / 16 + 1 = 11 rows, (48 - 32) / 16 + 1 = 2 columns
    assert sum(
        test.get_data_info(i)['gt_label'] == 0
        for i in range(len(test))) == 11 * 2
    # the same seed, the same tiles; another seed, other positions
    again = PhotoTilesDataset(split='train', num_tiles=120, seed=3)
    other = PhotoTilesDataset(split='train', num_tiles=120, seed=4)
    assert np.array_equal(again[5]['img'], train[5]['img'])
    assert not np.array_equal(other[5]['img'], train[5]['img'])
    with pytest.raises(ValueError, match="split must be"):
        PhotoTilesDataset(split='val')
