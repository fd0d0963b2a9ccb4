# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict

import cv2
import numpy as np
from mmpretrain.datasets.transforms import ColorJitter
from PIL import Image, ImageEnhance

from mocoplug.compat.mmcv_hue import pillow_hue
from mocoplug.registry import TRANSFORMS


def rotate_hue(rgb: np.ndarray, hue_factor: float) -> np.ndarray:
    """Rotate the hue of a uint8 RGB image by ``hue_factor`` of a turn in
    float HSV, rounding once (torchvision's ``adjust_hue`` within 1 level)."""
    hsv = cv2.cvtColor(
        rgb.astype(np.float32) * np.float32(1 / 255), cv2.COLOR_RGB2HSV)
    hue = hsv[..., 0]  # degrees in [0, 360)
    hue += np.float32((hue_factor * 360) % 360)
    np.subtract(hue, 360, out=hue, where=hue >= 360)
    return cv2.convertScaleAbs(cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB), alpha=255)


@TRANSFORMS.register_module()
class FastColorJitter(ColorJitter):
    """mmpretrain's ``ColorJitter`` (same arguments and random draws) with
    one PIL conversion and the hue rotated in float HSV by OpenCV; only the
    hue differs (``hue_backend='pillow'``: bit for bit).

    Required keys: ``img`` (uint8 BGR, H x W x 3). Modified keys: ``img``.

    Args:
        brightness, contrast, saturation, hue: As ``ColorJitter``.
        hue_backend (str): ``'float'`` (default) or ``'pillow'``.
    """

    def __init__(self,
                 brightness=0.,
                 contrast=0.,
                 saturation=0.,
                 hue=0.,
                 hue_backend: str = 'float') -> None:
        super().__init__(brightness, contrast, saturation, hue)
        if hue_backend not in ('float', 'pillow'):
            raise ValueError(f"FastColorJitter: hue_backend must be 'float' "
                             f"or 'pillow', got {hue_backend!r}")
        self.hue_backend = hue_backend

    def transform(self, results: Dict) -> Dict:
        img = results['img']
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(
                'FastColorJitter needs a uint8 H x W x 3 BGR `img`, got '
                f'dtype {img.dtype} and shape {img.shape}')
        order, brightness, contrast, saturation, hue = self._rand_params()
        image = Image.fromarray(np.ascontiguousarray(img[..., ::-1]), 'RGB')
        for index in order:
            if index == 0 and brightness is not None:
                image = ImageEnhance.Brightness(image).enhance(brightness)
            elif index == 1 and contrast is not None:
                image = ImageEnhance.Contrast(image).enhance(contrast)
            elif index == 2 and saturation is not None:
                image = ImageEnhance.Color(image).enhance(saturation)
            elif index == 3 and hue is not None:
                if self.hue_backend == 'pillow':
                    image = pillow_hue(image, hue)
                else:
                    image = Image.fromarray(
                        rotate_hue(np.asarray(image), hue), 'RGB')
        results['img'] = np.ascontiguousarray(np.asarray(image)[..., ::-1])
        return results

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f', hue_backend={self.hue_backend})'
