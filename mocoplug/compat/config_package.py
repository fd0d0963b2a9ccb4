# Copyright (c) mocoplug contributors. All rights reserved.
"""Let configs inherit mocoplug's configs as ``mocoplug::dir/name.py``.

mmengine resolves ``package::path`` bases only for the packages listed in
``mmengine.config.utils.MODULE2PACKAGE``; adding mocoplug there (on
``import mocoplug``) makes ``_base_ = 'mocoplug::benchmarks/...'`` find the
configs that setup.py ships in ``mocoplug/.mim/configs``. mmengine 0.10.7
requires a folder in such a path, so the top-level pretraining configs are
inherited by relative path (``_base_ = '../mocov2_r50_8xb32.py'``) or by
absolute path.
"""
from mmengine.config import utils as config_utils


def register_config_package() -> None:
    """Add mocoplug to mmengine's map of packages with shipped configs."""
    config_utils.MODULE2PACKAGE.setdefault('mocoplug', 'mocoplug')
