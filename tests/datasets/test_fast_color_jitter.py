# Copyright (c) mocoplug contributors. All rights reserved.
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as TF
from mmpretrain.datasets.transforms import ColorJitter

from mocoplug.datasets.transforms import FastColorJitter
from mocoplug.datasets.transforms.fast_color_jitter import rotate_hue
from .photo import photo_crop

MOCO_V2 = dict(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
MOCO_V1 = dict(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.4)


def run(transform, img, seed):
    np.random.seed(seed)
    out = transform(dict(img=img.copy()))['img']
    return out, np.random.rand()  # the next draw: same if same draws


@pytest.mark.parametrize('params', [MOCO_V2, MOCO_V1])
def test_pillow_hue_is_bit_identical_to_mmpretrain(params):
    """Same draws, same operations: mmpretrain's output bit for bit."""
    ours = FastColorJitter(**params, hue_backend='pillow')
    ref = ColorJitter(**params)
    for seed in range(12):
        img = photo_crop(20, 28, seed)
        a, next_a = run(ours, img, seed)
        b, next_b = run(ref, img, seed)
        assert np.array_equal(a, b), seed
        assert next_a == next_b and a.dtype == np.uint8


def test_without_hue_both_backends_are_bit_identical_to_mmpretrain():
    params = dict(brightness=0.4, contrast=0.4, saturation=0.4)
    for seed in range(6):
        img = photo_crop(20, 28, seed)
        b, _ = run(ColorJitter(**params), img, seed)
        a, _ = run(FastColorJitter(**params), img, seed)
        assert np.array_equal(a, b)


@pytest.mark.parametrize('factor', [-0.5, -0.1, -0.013, 0., 0.07, 0.3, 0.5])
def test_float_hue_matches_torchvision_within_one_grey_level(factor):
    rgb = photo_crop(24, 30, seed=3)[..., ::-1].copy()
    ref = TF.adjust_hue(torch.from_numpy(rgb).permute(2, 0, 1) / 255., factor)
    ref = (ref * 255).round().permute(1, 2, 0).numpy().astype(int)
    ours = rotate_hue(rgb, factor).astype(int)
    # both compute the same rotation in float32 (within 1e-3 of the exact
    # value) and round once: whichever way a CPU rounds a value near .5,
    # they differ by < 0.5 + 0.5 + 2e-3, i.e. at most 1 level
    assert np.abs(ours - ref).max() <= 1
    assert np.array_equal(ours[:2, :2], rgb[:2, :2])  # grey stays grey


def test_float_hue_jitter_is_the_rotation_of_the_drawn_factor():
    """Only hue, drawn from [0.05, 0.05]: the transform rotates BGR input
    by the drawn factor (in RGB order)."""
    img = photo_crop(16, 16, seed=1)
    out = FastColorJitter(hue=(0.05, 0.05))(dict(img=img.copy()))['img']
    expected = rotate_hue(img[..., ::-1].copy(), 0.05)[..., ::-1]
    assert np.array_equal(out, expected)


def test_float_hue_stays_close_to_mmpretrain():
    """Stated tolerance against mmpretrain's (PIL 8-bit HSV) jitter, same
    draws: under one grey level on average, at most 12 (PIL's own
    quantisation error is of that size)."""
    diffs = []
    for seed in range(12):
        img = photo_crop(32, 32, seed)
        a, next_a = run(FastColorJitter(**MOCO_V2), img, seed)
        b, next_b = run(ColorJitter(**MOCO_V2), img, seed)
        assert next_a == next_b
        diffs.append(np.abs(a.astype(int) - b))
    diffs = np.stack(diffs)
    assert diffs.mean() < 1.0 and diffs.max() <= 12


def test_bad_input_and_argument_are_named():
    with pytest.raises(ValueError, match='hue_backend'):
        FastColorJitter(hue=0.1, hue_backend='cv2')
    with pytest.raises(ValueError, match='uint8'):
        FastColorJitter(hue=0.1)(dict(img=np.zeros((4, 4, 3), np.float32)))
