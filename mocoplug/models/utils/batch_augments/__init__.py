# Copyright (c) mocoplug contributors. All rights reserved.
from .batch_color_jitter import BatchColorJitter
from .batch_gaussian_blur import BatchGaussianBlur
from .batch_random_grayscale import BatchRandomGrayscale
from .batch_solarize import BatchSolarize
from .decode_resized_crop import decode_views
from .photometric_view_augment import PhotometricViewAugment, build_batch_op

__all__ = [
    'BatchColorJitter', 'BatchGaussianBlur', 'BatchRandomGrayscale',
    'BatchSolarize', 'PhotometricViewAugment', 'build_batch_op', 'decode_views'
]
