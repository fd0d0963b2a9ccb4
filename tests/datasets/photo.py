# Copyright (c) mocoplug contributors. All rights reserved.
"""Small crops of real photographs (scikit-learn's bundled sample images),
for transform tests that compare values."""
import functools

import cv2
import numpy as np


@functools.lru_cache(maxsize=1)
def _photos():
    from sklearn.datasets import load_sample_images
    return [img[..., ::-1].copy() for img in load_sample_images().images]


def photo_crop(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A ``height x width`` uint8 BGR crop of china.jpg or flower.jpg,
    resized from a random region, with a flat grey corner (hue and
    saturation undefined there)."""
    rng = np.random.RandomState(seed)
    src = _photos()[seed % 2]
    y, x = rng.randint(0, 150), rng.randint(0, 300)
    img = cv2.resize(
        src[y:y + 240, x:x + 320], (width, height),
        interpolation=cv2.INTER_AREA)
    img[:2, :2] = 128
    return img
