# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Tuple

import cv2
import numpy as np
from mmcv.transforms import BaseTransform

from mocoplug.registry import TRANSFORMS


@TRANSFORMS.register_module()
class FixedRandomAffine(BaseTransform):
    """A random shift/rotation/scale/contrast change drawn from
    ``(seed, sample_idx)``: the same every time an image is loaded.

    Required keys: ``img``, ``sample_idx``. Modified keys: ``img``.

    Args:
        degrees (float): Rotation range [-degrees, degrees].
        translate (float): Shift range [-t, t] x image size per axis.
        scale (Tuple[float, float]): Zoom range.
        contrast (Tuple[float, float]): Contrast range, around the mean.
        border_value (int): Fill value outside the image.
        seed (int): Base seed.
    """

    def __init__(self,
                 degrees: float = 20.,
                 translate: float = 0.1,
                 scale: Tuple[float, float] = (0.8, 1.2),
                 contrast: Tuple[float, float] = (0.5, 1.5),
                 border_value: int = 0,
                 seed: int = 0) -> None:
        self.degrees, self.translate = degrees, translate
        self.scale, self.contrast = tuple(scale), tuple(contrast)
        self.border_value, self.seed = border_value, seed

    def params(self, sample_idx: int) -> dict:
        """The perturbation of image ``sample_idx``."""
        rng = np.random.RandomState([self.seed, int(sample_idx)])
        return dict(
            angle=rng.uniform(-self.degrees, self.degrees),
            shift=rng.uniform(-self.translate, self.translate, size=2),
            scale=rng.uniform(*self.scale),
            contrast=rng.uniform(*self.contrast))

    def transform(self, results: dict) -> dict:
        if 'sample_idx' not in results:
            raise KeyError('FixedRandomAffine needs `sample_idx` in the '
                           'results (set by mmengine BaseDataset)')
        img, p = results['img'], self.params(results['sample_idx'])
        h, w = img.shape[:2]
        matrix = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5),
                                         p['angle'], p['scale'])
        matrix[:, 2] += p['shift'] * (w, h)
        border = (self.border_value, ) * 3  # bilinear (the default flags)
        img = cv2.warpAffine(img, matrix, (w, h), borderValue=border)
        img = img.astype(np.float32)
        img = (img - img.mean()) * p['contrast'] + img.mean()
        results['img'] = np.clip(img, 0, 255).astype(np.uint8)
        return results

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(degrees={self.degrees}, '
                f'translate={self.translate}, scale={self.scale}, '
                f'contrast={self.contrast}, seed={self.seed})')
