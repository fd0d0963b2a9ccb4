# Copyright (c) mocoplug contributors. All rights reserved.
import random

import numpy as np
import pytest
from mmcv.transforms import RandomGrayscale

from mocoplug.datasets.transforms import FastRandomGrayscale
from .photo import photo_crop

MOCO = dict(keep_channels=True, channel_weights=(0.114, 0.587, 0.2989))


@pytest.mark.parametrize('kwargs', [
    MOCO,
    dict(keep_channels=False, channel_weights=(0.114, 0.587, 0.2989)),
    dict(keep_channels=True, channel_weights=(1., 2., 1.)),
])
def test_bit_identical_to_mmcv(kwargs):
    rng = np.random.RandomState(0)
    every_value = rng.permutation(np.arange(256,
                                            dtype=np.uint8).repeat(3)).reshape(
                                                16, 16, 3)
    for img in (every_value, photo_crop(20, 24, 0), photo_crop(9, 7, 1)):
        a = FastRandomGrayscale(prob=1., **kwargs)(dict(img=img))['img']
        b = RandomGrayscale(prob=1., **kwargs)(dict(img=img))['img']
        assert a.dtype == b.dtype == np.uint8
        assert np.array_equal(a, b)
    img = photo_crop(6, 6, 2).astype(np.float32) + 0.5
    a = FastRandomGrayscale(prob=1., **kwargs)(dict(img=img))['img']
    b = RandomGrayscale(prob=1., **kwargs)(dict(img=img))['img']
    assert np.array_equal(a, b)


def test_same_draws_as_mmcv():
    img = photo_crop(8, 8, 0)
    ours, ref = FastRandomGrayscale(
        prob=0.2, **MOCO), RandomGrayscale(
            prob=0.2, **MOCO)
    for seed in range(30):
        random.seed(seed)
        a = ours(dict(img=img.copy()))['img']
        next_a = random.random()
        random.seed(seed)
        b = ref(dict(img=img.copy()))['img']
        assert random.random() == next_a
        assert np.array_equal(a, b)


def test_channel_mismatch_is_named():
    with pytest.raises(ValueError, match='channel_weights'):
        FastRandomGrayscale(
            prob=1., channel_weights=(1., 1.))(
                dict(img=np.zeros((4, 4, 3), np.uint8)))
