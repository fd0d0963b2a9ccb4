# Copyright (c) mocoplug contributors. All rights reserved.
"""Let configs inherit mocoplug's configs as ``mocoplug::dir/name.py``.

mmengine resolves ``package::path`` bases only for the packages listed in
``mmengine.config.utils.MODULE2PACKAGE``; adding mocoplug there (on
``import mocoplug``) makes ``_base_ = 'mocoplug::mocov2/...'`` or
``'mocoplug::benchmarks/...'`` find the configs that setup.py ships in
``mocoplug/.mim/configs``. mmengine 0.10.7 requires a folder in such a path:
the short top-level ``configs/mocov2_r50_8xb32.py`` is inherited as its
target, ``mocoplug::mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py``.

mmengine finds a package's configs through its distribution's location,
which for an editable install (what ``make demo`` sets up) is
site-packages, not the checkout: for mocoplug the configs are looked up
beside the package that is imported instead.
"""
import os.path as osp

from mmengine.config import config as config_module
from mmengine.config import utils as config_utils


def register_config_package() -> None:
    """Add mocoplug to mmengine's map of packages with shipped configs and
    resolve its path from the imported package."""
    config_utils.MODULE2PACKAGE.setdefault('mocoplug', 'mocoplug')
    installed_path = config_module.get_installed_path
    if getattr(installed_path, 'mocoplug_patched', False):
        return

    def get_installed_path(package: str) -> str:
        if package == 'mocoplug':
            import mocoplug
            return osp.dirname(osp.abspath(mocoplug.__file__))
        return installed_path(package)

    get_installed_path.mocoplug_patched = True
    config_module.get_installed_path = get_installed_path
