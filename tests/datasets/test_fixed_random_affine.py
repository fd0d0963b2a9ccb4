# Copyright (c) mocoplug contributors. All rights reserved.
import numpy as np
import pytest

from mocoplug.datasets.transforms import FixedRandomAffine


def square(size=32):
    img = np.zeros((size, size, 3), np.uint8)
    img[12:20, 12:20] = 200
    return img


def test_same_image_same_perturbation_other_image_other_one():
    t = FixedRandomAffine(seed=0)
    a = t(dict(img=square(), sample_idx=3))['img']
    b = t(dict(img=square(), sample_idx=3))['img']
    c = t(dict(img=square(), sample_idx=4))['img']
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, square())
    assert a.shape == (32, 32, 3) and a.dtype == np.uint8


def test_identity_parameters_leave_the_image():
    t = FixedRandomAffine(
        degrees=0, translate=0, scale=(1, 1), contrast=(1, 1))
    assert np.array_equal(t(dict(img=square(), sample_idx=0))['img'], square())


def test_shift_moves_the_content():
    t = FixedRandomAffine(
        degrees=0, translate=0.25, scale=(1, 1), contrast=(1, 1))
    p = t.params(7)
    out = t(dict(img=square(), sample_idx=7))['img'][..., 0]
    ys, xs = np.nonzero(out > 100)
    assert xs.mean() == pytest.approx(15.5 + p['shift'][0] * 32, abs=1.0)
    assert ys.mean() == pytest.approx(15.5 + p['shift'][1] * 32, abs=1.0)


def test_needs_sample_idx():
    with pytest.raises(KeyError, match='sample_idx'):
        FixedRandomAffine()(dict(img=square()))
