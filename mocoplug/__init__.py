# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug: MoCo v1/v2/v3 for the OpenMMLab ecosystem.

``import mocoplug`` (or ``custom_imports=dict(imports=['mocoplug'])`` in a
config) registers every component in mocoplug's registry nodes, makes
mmengine load its own checkpoints under torch >= 2.6, lets configs inherit
``mocoplug::dir/config.py`` and repairs mmcv 2.1.0's hue jitter under
numpy >= 2 (see mocoplug/utils). It needs mmcv 2.1.0 but not its compiled
ops: mmcv-lite serves pretraining and evaluation. The detection-transfer
components (mocoplug/detection), which need the ops, are registered in
mmdet's registries by ``import mocoplug.detection``, as the detection
configs' ``custom_imports`` do.
"""
import warnings

from .utils import (patch_adjust_hue, register_checkpoint_loader,
                    register_config_package)
from .version import __version__, version_info

register_checkpoint_loader()
register_config_package()
patch_adjust_hue()

# mmcv-lite's transformer bricks warn, when mmpretrain's models import
# them, that MultiScaleDeformableAttention needs the full mmcv. No mocoplug
# component uses it (only mmdet's DETR family, which needs the full mmcv
# anyway), so on mmcv-lite the warning is noise in every pretraining log.
warnings.filterwarnings(
    'ignore',
    message='Fail to import ``MultiScaleDeformableAttention``',
    category=UserWarning,
    module='mmcv.cnn.bricks.transformer')

# isort: off
from . import datasets, engine, evaluation  # noqa: E402,F401
from . import models, visualization  # noqa: E402,F401
# isort: on

__all__ = ['__version__', 'version_info']
