# Copyright (c) mocoplug contributors. All rights reserved.
from .checked_load_image import CheckedLoadImageFromFile
from .fixed_random_affine import FixedRandomAffine

__all__ = ['CheckedLoadImageFromFile', 'FixedRandomAffine']
