# Copyright (c) mocoplug contributors. All rights reserved.
from .fixed_random_affine import FixedRandomAffine
from .reseed_worker_per_epoch import ReseedWorkerPerEpoch

__all__ = ['FixedRandomAffine', 'ReseedWorkerPerEpoch']
