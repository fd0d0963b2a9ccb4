# Copyright (c) mocoplug contributors. All rights reserved.
"""Detection-transfer components, registered in mmdet's registries by the
detection configs' ``custom_imports`` (not by ``import mocoplug``)."""
from mmdet.registry import HOOKS

from mocoplug.engine.hooks import MoCoConfigCheckHook, NonFiniteLossHook
from .precise_bn_hook import DetectionPreciseBNHook, precise_bn_stats
from .scalable_res_layer import ScalableResLayerExtraNorm

# mocoplug's checks on mmdet's runtime: mmengine 0.10.7 finds a scope-
# qualified type only in the root's direct children, which mocoplug's hook
# registry (a child of mmpretrain's) is not
for _hook in (MoCoConfigCheckHook, NonFiniteLossHook):
    HOOKS.register_module(module=_hook)

__all__ = [
    'DetectionPreciseBNHook', 'precise_bn_stats', 'ScalableResLayerExtraNorm'
]
