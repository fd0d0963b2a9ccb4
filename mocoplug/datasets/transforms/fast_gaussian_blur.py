# Copyright (c) mocoplug contributors. All rights reserved.
import math
from typing import Dict

import cv2
from mmpretrain.datasets.transforms import GaussianBlur

from mocoplug.registry import TRANSFORMS


def kernel_size(sigma: float) -> int:
    """Odd kernel width covering +-3 sigma: ``2 * ceil(3 sigma) + 1``."""
    return 2 * math.ceil(3 * sigma) + 1


@TRANSFORMS.register_module()
class FastGaussianBlur(GaussianBlur):
    """mmpretrain's ``GaussianBlur`` (same arguments and draws) with
    OpenCV's separable Gaussian (std ``radius``, reflected borders).

    Required keys: ``img`` (H x W x C). Modified keys: ``img``.
    """

    def transform(self, results: Dict) -> Dict:
        if self.random_disable():
            return results
        sigma = self.radius if self.radius is not None else \
            self.random_magnitude()
        if sigma <= 0:
            return results
        size = kernel_size(sigma)
        results['img'] = cv2.GaussianBlur(
            results['img'], (size, size),
            sigmaX=sigma,
            sigmaY=sigma,
            borderType=cv2.BORDER_REFLECT_101)
        return results
