# Copyright (c) mocoplug contributors. All rights reserved.
"""BandJitter and BandMeanGrayscale against their definitions written out
(SSL4EO-S12's brightness, contrast and grayscale for N bands)."""
import numpy as np
import torch

from mocoplug.datasets.transforms import BandJitter, BandMeanGrayscale
from mocoplug.models.data_preprocessors import BandDataPreprocessor


def image(bands=5, dtype=np.uint16):
    rng = np.random.default_rng(0)
    return rng.integers(0, 60000, (6, 7, bands)).astype(dtype)


def test_band_jitter_is_a_scale_then_a_move_from_each_bands_mean():
    img = image()
    np.random.seed(3)
    out = BandJitter(
        brightness=0.4, contrast=0.3, prob=1.)(dict(img=img.copy()))['img']
    np.random.seed(3)
    np.random.rand()  # the draw against prob
    b = np.random.uniform(0.6, 1.4)
    c = np.random.uniform(0.7, 1.3)
    scaled = img.astype(np.float64) * b
    mean = scaled.mean(axis=(0, 1))
    expected = (scaled - mean) * c + mean
    assert out.dtype == np.float32 and out.shape == img.shape
    # float32 arithmetic on values < 1e5: relative round-off ~1e-7 per op
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    assert out.max() > 255  # no 8-bit clipping
    kept = BandJitter(prob=0.)(dict(img=img.copy()))['img']
    assert kept.dtype == np.float32 and np.array_equal(kept, img)


def test_band_mean_grayscale_replaces_every_band_by_their_mean():
    img = image(4)
    out = BandMeanGrayscale(prob=1.)(dict(img=img.copy()))['img']
    expected = img.astype(np.float64).mean(axis=2, keepdims=True)
    np.testing.assert_allclose(out, np.repeat(expected, 4, axis=2), rtol=1e-6)
    kept = BandMeanGrayscale(prob=0.)(dict(img=img.copy()))['img']
    assert kept.dtype == np.float32 and np.array_equal(kept, img)


def test_band_preprocessor_normalises_each_band():
    pre = BandDataPreprocessor(mean=[1., 2., 3., 4.], std=[2., 2., 4., 4.])
    x = torch.arange(4 * 2 * 2, dtype=torch.float32).view(4, 2, 2)
    out = pre(dict(inputs=[x[None].clone()], data_samples=None),
              False)['inputs'][0][0]
    expected = (x - torch.tensor([1., 2., 3., 4.]).view(4, 1, 1)) / \
        torch.tensor([2., 2., 4., 4.]).view(4, 1, 1)
    assert torch.equal(out, expected)
    for bad in (dict(mean=[1.] * 4, std=[1.] * 3),
                dict(mean=[1.] * 4, std=[1.] * 4, to_rgb=True)):
        try:
            BandDataPreprocessor(**bad)
        except ValueError:
            continue
        raise AssertionError(bad)
