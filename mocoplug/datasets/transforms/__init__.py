# Copyright (c) mocoplug contributors. All rights reserved.
from .band_jitter import BandJitter
from .band_mean_grayscale import BandMeanGrayscale
from .checked_load_image import CheckedLoadImageFromFile
from .crop_box_multi_view import CropBoxMultiView
from .fast_color_jitter import FastColorJitter
from .fast_gaussian_blur import FastGaussianBlur
from .fast_random_grayscale import FastRandomGrayscale
from .fixed_random_affine import FixedRandomAffine
from .geometric_multi_view import GeometricMultiView
from .load_image_bytes import LoadImageBytes
from .pack_encoded_views import PackEncodedViews
from .reseed_worker_per_epoch import ReseedWorkerPerEpoch

__all__ = [
    'BandJitter', 'BandMeanGrayscale', 'CheckedLoadImageFromFile',
    'CropBoxMultiView', 'FastColorJitter', 'FastGaussianBlur',
    'FastRandomGrayscale', 'FixedRandomAffine', 'GeometricMultiView',
    'LoadImageBytes', 'PackEncodedViews', 'ReseedWorkerPerEpoch'
]
