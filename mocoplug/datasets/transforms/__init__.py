# Copyright (c) mocoplug contributors. All rights reserved.
from .fast_color_jitter import FastColorJitter
from .fast_gaussian_blur import FastGaussianBlur
from .fast_random_grayscale import FastRandomGrayscale
from .fixed_random_affine import FixedRandomAffine

__all__ = [
    'FastColorJitter', 'FastGaussianBlur', 'FastRandomGrayscale',
    'FixedRandomAffine'
]
