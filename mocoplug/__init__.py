# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug: MoCo v1/v2/v3 for the OpenMMLab ecosystem.

``import mocoplug`` (or ``custom_imports=dict(imports=['mocoplug'])`` in a
config) registers every component in mocoplug's registry nodes, makes
mmengine load its own checkpoints under torch >= 2.6, lets configs inherit
``mocoplug::dir/config.py`` and repairs mmcv 2.1.0's hue jitter under
numpy >= 2 (see mocoplug/utils). The detection-transfer components are
registered in mmdet's registries (mocoplug/detection).
"""
from .utils import (patch_adjust_hue, register_checkpoint_loader,
                    register_config_package)
from .version import __version__, version_info

register_checkpoint_loader()
register_config_package()
patch_adjust_hue()

# isort: off
from . import datasets, detection, engine, evaluation  # noqa: E402,F401
from . import models, visualization  # noqa: E402,F401
# isort: on

__all__ = ['__version__', 'version_info']
