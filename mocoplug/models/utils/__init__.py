# Copyright (c) mocoplug contributors. All rights reserved.
from .moco_pretrained_init import MoCoPretrainedInit
from .split_batch_norm import SplitBatchNorm

__all__ = ['MoCoPretrainedInit', 'SplitBatchNorm']
