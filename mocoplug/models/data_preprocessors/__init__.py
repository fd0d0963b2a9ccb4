# Copyright (c) mocoplug contributors. All rights reserved.
from .device_augment_data_preprocessor import DeviceAugmentDataPreprocessor

__all__ = ['DeviceAugmentDataPreprocessor']
