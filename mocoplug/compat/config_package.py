# Copyright (c) mocoplug contributors. All rights reserved.
"""Let configs inherit mocoplug's configs as ``mocoplug::dir/name.py``.

mmengine resolves ``package::path`` bases only for the packages listed in
``mmengine.config.utils.MODULE2PACKAGE``; adding mocoplug there (on
``import mocoplug``) makes ``_base_ = 'mocoplug::mocov2/...'`` or
``'mocoplug::benchmarks/...'`` find the configs that setup.py ships in
``mocoplug/.mim/configs``. mmengine 0.10.7 requires a folder in such a path:
the short top-level ``configs/mocov2_r50_8xb32.py`` is inherited as its
target, ``mocoplug::mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py``.
"""
from mmengine.config import utils as config_utils


def register_config_package() -> None:
    """Add mocoplug to mmengine's map of packages with shipped configs."""
    config_utils.MODULE2PACKAGE.setdefault('mocoplug', 'mocoplug')
