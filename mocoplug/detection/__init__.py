# Copyright (c) mocoplug contributors. All rights reserved.
"""Detection-transfer components, registered in mmdet's registries.

Imported by the detection configs (``custom_imports``), not by
``import mocoplug``, so that pretraining needs neither mmdet's models nor
mmcv's compiled ops. Importing it without those ops stops at once with a
:class:`MissingMMCVOpsError` that names the set-up command to run.
"""
from .mmcv_ops import MissingMMCVOpsError, require_mmcv_ops

require_mmcv_ops()

# isort: off
from .precise_bn_hook import (  # noqa: E402
    DetectionPreciseBNHook, precise_bn_stats)
# isort: on

__all__ = [
    'DetectionPreciseBNHook', 'MissingMMCVOpsError', 'precise_bn_stats',
    'require_mmcv_ops'
]
