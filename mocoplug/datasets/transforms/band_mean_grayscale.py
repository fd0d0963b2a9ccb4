# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict

import numpy as np
from mmcv.transforms import BaseTransform

from mocoplug.registry import TRANSFORMS


@TRANSFORMS.register_module()
class BandMeanGrayscale(BaseTransform):
    """Grayscale for any number of bands: with probability ``prob`` every
    band becomes the mean of the bands, as SSL4EO-S12's MoCo v2 recipe
    (Wang et al., 2022) does for 13 Sentinel-2 bands.

    Required keys: ``img`` (H x W x bands). Modified keys: ``img`` (float32,
    drawn or not).
    """

    def __init__(self, prob: float = 0.2) -> None:
        self.prob = prob

    def transform(self, results: Dict) -> Dict:
        img = results['img'].astype(np.float32)
        if np.random.rand() < self.prob and img.ndim == 3:
            img = np.repeat(img.mean(axis=2, keepdims=True), img.shape[2], 2)
        results['img'] = img
        return results

    def __repr__(self) -> str:
        return f'{type(self).__name__}(prob={self.prob})'
