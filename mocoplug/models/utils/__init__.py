# Copyright (c) mocoplug contributors. All rights reserved.
from .split_batch_norm import SplitBatchNorm2d

__all__ = ['SplitBatchNorm2d']
