# Copyright (c) mocoplug contributors. All rights reserved.
from .checked_load_image import CheckedLoadImageFromFile
from .fast_color_jitter import FastColorJitter
from .fast_gaussian_blur import FastGaussianBlur
from .fast_random_grayscale import FastRandomGrayscale
from .fixed_random_affine import FixedRandomAffine
from .reseed_worker_per_epoch import ReseedWorkerPerEpoch

__all__ = [
    'CheckedLoadImageFromFile', 'FastColorJitter', 'FastGaussianBlur',
    'FastRandomGrayscale', 'FixedRandomAffine', 'ReseedWorkerPerEpoch'
]
