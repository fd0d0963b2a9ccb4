# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict

import numpy as np
from mmcv.transforms import RandomGrayscale

from mocoplug.registry import TRANSFORMS


@TRANSFORMS.register_module()
class FastRandomGrayscale(RandomGrayscale):
    """mmcv's ``RandomGrayscale`` (same arguments, same random draw),
    bit-identical; a uint8 image's products come from 256-entry tables.

    Required keys: ``img``. Modified keys: ``img``.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tables = None

    def _weighted_sum(self, img: np.ndarray) -> np.ndarray:
        weights = np.array(self.channel_weights) / sum(self.channel_weights)
        if img.dtype != np.uint8:  # mmcv's own formula
            return (weights * img).sum(axis=2)
        if self._tables is None:
            self._tables = [w * np.arange(256.) for w in weights]
        total = self._tables[0][img[..., 0]]
        for channel in range(1, img.shape[2]):
            total += self._tables[channel][img[..., channel]]
        return total

    def transform(self, results: Dict) -> Dict:
        if self.color_format == 'hsv':
            return super().transform(results)
        img = results['img']
        img = img[..., None] if img.ndim == 2 else img
        channels = img.shape[2]
        if self._random_prob() < self.prob and channels > 1:
            if channels != len(self.channel_weights):
                raise ValueError(
                    f'FastRandomGrayscale: {len(self.channel_weights)} '
                    f'channel_weights for a {channels}-channel image')
            gray = self._weighted_sum(img).astype(np.uint8)
            img = np.repeat(gray[..., None], channels, 2) if \
                self.keep_channels else gray
        results['img'] = img.astype(np.uint8)
        return results
