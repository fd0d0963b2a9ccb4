# Copyright (c) mocoplug contributors. All rights reserved.
"""Detection-transfer components, registered in mmdet's registries by the
detection configs' ``custom_imports`` (not by ``import mocoplug``)."""
from mmdet.registry import HOOKS

from mocoplug.engine.hooks import MoCoConfigCheckHook, NonFiniteLossHook
from .band_det_data_preprocessor import BandDetDataPreprocessor
from .precise_bn_hook import DetectionPreciseBNHook, precise_bn_stats
from .scalable_res_layer import ScalableResLayerExtraNorm

# mocoplug's checks on mmdet's runtime (docs/design_notes.md)
for _hook in (MoCoConfigCheckHook, NonFiniteLossHook):
    HOOKS.register_module(module=_hook)

__all__ = [
    'BandDetDataPreprocessor', 'DetectionPreciseBNHook', 'precise_bn_stats',
    'ScalableResLayerExtraNorm'
]
