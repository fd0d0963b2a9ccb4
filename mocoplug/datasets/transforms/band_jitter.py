# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict

import numpy as np
from mmcv.transforms import BaseTransform

from mocoplug.registry import TRANSFORMS


@TRANSFORMS.register_module()
class BandJitter(BaseTransform):
    """Brightness and contrast for any number of bands and any value range,
    as the MoCo v2 recipe of SSL4EO-S12 (Wang et al., "SSL4EO-S12: A
    Large-Scale Multi-Modal, Multi-Temporal Dataset for Self-Supervised
    Learning in Earth Observation", 2022) applies them to 13 Sentinel-2
    bands: with probability ``prob``, the image times a factor drawn from
    [1 - brightness, 1 + brightness], then every band moved from its own
    mean by a factor drawn from [1 - contrast, 1 + contrast].

    Required keys: ``img`` (H x W x bands). Modified keys: ``img`` (float32
    whether jittered or not, not clipped).
    """

    def __init__(self,
                 brightness: float = 0.4,
                 contrast: float = 0.4,
                 prob: float = 0.8) -> None:
        self.brightness, self.contrast, self.prob = brightness, contrast, prob

    def transform(self, results: Dict) -> Dict:
        img = results['img'].astype(np.float32)
        if np.random.rand() < self.prob:
            b, c = self.brightness, self.contrast
            img *= np.random.uniform(max(0., 1 - b), 1 + b)
            mean = img.mean(axis=(0, 1), keepdims=True)
            factor = np.random.uniform(max(0., 1 - c), 1 + c)
            img = (img - mean) * np.float32(factor) + mean
        results['img'] = img
        return results

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(brightness={self.brightness}, '
                f'contrast={self.contrast}, prob={self.prob})')
