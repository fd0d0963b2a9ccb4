# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug: MoCo v1/v2/v3 for the OpenMMLab ecosystem.

``import mocoplug`` (or ``custom_imports=dict(imports=['mocoplug'])`` in a
config) applies the compatibility patches of :mod:`mocoplug.compat` and
registers every component in mocoplug's registry nodes. It needs mmcv 2.1.0
but not its compiled ops: mmcv-lite serves pretraining and evaluation. The
detection-transfer components (mocoplug/detection), which need the ops, are
registered in mmdet's registries by ``import mocoplug.detection``, as the
detection configs' ``custom_imports`` do.
"""
from . import compat  # noqa: F401  (applies the patches first)
from .version import __version__, version_info

# isort: off
from . import datasets, engine, evaluation  # noqa: E402,F401
from . import models, visualization  # noqa: E402,F401
# isort: on

__all__ = ['__version__', 'version_info']
