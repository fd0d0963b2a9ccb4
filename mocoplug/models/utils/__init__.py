# Copyright (c) mocoplug contributors. All rights reserved.
from .feature_dims import check_feature_dims
from .moco_pretrained_init import MoCoPretrainedInit
from .split_batch_norm import SplitBatchNorm

__all__ = ['MoCoPretrainedInit', 'SplitBatchNorm', 'check_feature_dims']
