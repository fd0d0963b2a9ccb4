# Copyright (c) mocoplug contributors. All rights reserved.
"""Fix mmcv 2.1.0's ``adjust_hue`` under numpy >= 2 (``np.uint8`` of a
negative hue shift overflows): the shift is wrapped modulo 256."""
from typing import Optional

import cv2
import mmcv
import numpy as np
from PIL import Image

ORIGINAL_ADJUST_HUE = mmcv.image.photometric.adjust_hue


def pillow_hue(pil_image: Image.Image, hue_factor: float) -> Image.Image:
    """mmcv's pillow ``adjust_hue`` of an RGB PIL image (shift mod 256)."""
    h, s, v = pil_image.convert('HSV').split()
    np_h = np.array(h, dtype=np.uint8)
    with np.errstate(over='ignore'):
        np_h += np.uint8(int(hue_factor * 255) % 256)
    hsv = Image.merge('HSV', (Image.fromarray(np_h, 'L'), s, v))
    return hsv.convert('RGB')


def adjust_hue(img: np.ndarray,
               hue_factor: float,
               backend: Optional[str] = None) -> np.ndarray:
    """mmcv's ``adjust_hue`` (BGR image, ``hue_factor`` in [-0.5, 0.5] of a
    turn) with the hue shift wrapped modulo 256."""
    backend = mmcv.image.io.imread_backend if backend is None else backend
    if backend not in ('cv2', 'pillow'):
        raise ValueError(f'backend: {backend} is not supported. Supported '
                         "backends are 'cv2', 'pillow'")
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f'hue_factor:{hue_factor} is not in [-0.5, 0.5].')
    if not (isinstance(img, np.ndarray) and img.ndim in (2, 3)):
        raise TypeError('img should be ndarray with dim=[2 or 3].')
    if backend == 'pillow':
        assert img.dtype == np.uint8, 'Pillow backend only support uint8 type'
        pil_image = Image.fromarray(img[..., ::-1], mode='RGB')
        return np.array(
            pillow_hue(pil_image, hue_factor), dtype=img.dtype)[..., ::-1]
    hsv_img = cv2.cvtColor(img.astype(np.uint8), cv2.COLOR_BGR2HSV_FULL)
    h, s, v = cv2.split(hsv_img)
    h = h.astype(np.uint8)
    with np.errstate(over='ignore'):
        h += np.uint8(int(hue_factor * 255) % 256)
    return cv2.cvtColor(cv2.merge([h, s, v]),
                        cv2.COLOR_HSV2BGR_FULL).astype(img.dtype)


def needs_hue_patch() -> bool:
    """Whether mmcv's adjust_hue breaks on a negative shift here."""
    try:
        ORIGINAL_ADJUST_HUE(np.zeros((1, 1, 3), np.uint8), -0.1, backend='cv2')
    except OverflowError:
        return True
    return False


def patch_adjust_hue() -> bool:
    """Install :func:`adjust_hue` in mmcv if needed; True if it did."""
    if not needs_hue_patch():
        return False
    for module in (mmcv, mmcv.image, mmcv.image.photometric):
        module.adjust_hue = adjust_hue
    return True
