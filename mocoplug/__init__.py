# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug: MoCo v1/v2/v3 for the OpenMMLab ecosystem.

``import mocoplug`` (or ``custom_imports=dict(imports=['mocoplug'])`` in a
config) registers every component in mocoplug's registry nodes and makes
mmengine load its own checkpoints under torch >= 2.6.
"""
from .utils import register_checkpoint_loader
from .version import __version__, version_info

register_checkpoint_loader()

from . import datasets, engine, models  # noqa: E402,F401

__all__ = ['__version__', 'version_info']
