# Copyright (c) mocoplug contributors. All rights reserved.
"""Let configs inherit mocoplug's configs as ``mocoplug::dir/name.py``
(mmengine 0.10.7 requires a folder in such a path)."""
import os.path as osp

from mmengine.config import config as config_module
from mmengine.config import utils as config_utils


def register_config_package() -> None:
    """Add mocoplug to mmengine's ``MODULE2PACKAGE``, path from the import."""
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
