# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug: MoCo v1/v2/v3 for OpenMMLab; importing it applies the patches
and registers every component but the detection ones."""
from . import compat  # noqa: F401  (applies the patches first)
from .version import __version__, version_info

# isort: off
from . import datasets, engine, evaluation, models, visualization  # noqa: F401
# isort: on

__all__ = ['__version__', 'version_info']
