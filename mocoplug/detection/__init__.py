# Copyright (c) mocoplug contributors. All rights reserved.
"""Detection-transfer components, registered in mmdet's registries by the
detection configs' ``custom_imports`` (not by ``import mocoplug``)."""
from .precise_bn_hook import DetectionPreciseBNHook, precise_bn_stats
from .scalable_res_layer import ScalableResLayerExtraNorm

__all__ = [
    'DetectionPreciseBNHook', 'precise_bn_stats', 'ScalableResLayerExtraNorm'
]
