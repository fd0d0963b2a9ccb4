# Copyright (c) mocoplug contributors. All rights reserved.
import cv2
import mmcv
import numpy as np
import pytest
from mmpretrain.datasets.transforms import ColorJitter

from mocoplug.compat.mmcv_hue import (ORIGINAL_ADJUST_HUE, adjust_hue,
                                      needs_hue_patch)


def image():
    return (np.random.RandomState(0).rand(16, 16, 3) * 255).astype(np.uint8)


@pytest.mark.parametrize('backend', ['cv2', 'pillow'])
def test_positive_shifts_equal_mmcv(backend):
    img = image()
    assert np.array_equal(
        adjust_hue(img, 0.2, backend), ORIGINAL_ADJUST_HUE(img, 0.2, backend))


def test_negative_shift_wraps_around():
    img = image()
    out = adjust_hue(img, -0.1, 'cv2')
    h, s, v = cv2.split(cv2.cvtColor(img, cv2.COLOR_BGR2HSV_FULL))
    h = ((h.astype(int) - 25) % 256).astype(np.uint8)  # int(-25.5) = -25
    expected = cv2.cvtColor(cv2.merge([h, s, v]), cv2.COLOR_HSV2BGR_FULL)
    assert np.array_equal(out, expected)


def test_installed_where_mmpretrain_looks_it_up():
    if needs_hue_patch():
        assert mmcv.adjust_hue is adjust_hue
    # MoCo v2's colour jitter runs on every draw, negative hues included
    jitter = ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.5)
    for seed in range(20):
        np.random.seed(seed)
        out = jitter(dict(img=image()))['img']
        assert out.shape == (16, 16, 3)
