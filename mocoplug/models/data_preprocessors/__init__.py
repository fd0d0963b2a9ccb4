# Copyright (c) mocoplug contributors. All rights reserved.
from .band_data_preprocessor import BandDataPreprocessor
from .device_augment_data_preprocessor import DeviceAugmentDataPreprocessor

__all__ = ['BandDataPreprocessor', 'DeviceAugmentDataPreprocessor']
