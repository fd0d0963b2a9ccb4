# Copyright (c) mocoplug contributors. All rights reserved.
from .encoder_checkpoint import load_encoder_checkpoint
from .feature_dims import check_feature_dims
from .moco_pretrained_init import MoCoPretrainedInit
from .precise_bn import precise_bn_stats
from .precision import at_least_float32, similarity_dtype
from .split_batch_norm import SplitBatchNorm

__all__ = [
    'MoCoPretrainedInit', 'SplitBatchNorm', 'at_least_float32',
    'check_feature_dims', 'load_encoder_checkpoint', 'precise_bn_stats',
    'similarity_dtype'
]
