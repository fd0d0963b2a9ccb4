# Copyright (c) mocoplug contributors. All rights reserved.
"""Detection-transfer components, registered in mmdet's registries.

Imported by the detection configs (``custom_imports``), not by
``import mocoplug``, so that pretraining does not import mmdet's models.
mmcv's compiled ops are not needed: without them ``import mocoplug`` has
torchvision serve the ones the detectors call (:mod:`mocoplug.compat`).
"""
from .precise_bn_hook import DetectionPreciseBNHook, precise_bn_stats
from .scalable_res_layer import ScalableResLayerExtraNorm

__all__ = [
    'DetectionPreciseBNHook', 'precise_bn_stats', 'ScalableResLayerExtraNorm'
]
