# Copyright (c) mocoplug contributors. All rights reserved.
from .digits import DigitsDataset
from .image_check import (IMAGE_EXTENSIONS, UnreadableImageError, check_image,
                          decode_image, find_images)
from .synthetic_images import SyntheticImageDataset
from .transforms import *  # noqa: F401,F403

__all__ = [
    'DigitsDataset', 'IMAGE_EXTENSIONS', 'UnreadableImageError', 'check_image',
    'decode_image', 'find_images', 'SyntheticImageDataset'
]
