# Copyright (c) mocoplug contributors. All rights reserved.
from .fixed_random_affine import FixedRandomAffine

__all__ = ['FixedRandomAffine']
