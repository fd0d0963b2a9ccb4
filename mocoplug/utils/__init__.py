# Copyright (c) mocoplug contributors. All rights reserved.
from ..compat import (load_from_local, patch_adjust_hue,
                      register_checkpoint_loader, register_config_package,
                      trusted_globals)
from ..datasets.labelled_folder import fill_data_root, labelled_folder_classes
from .config_options import (enabled_default_hooks, fill_pretrained,
                             parse_launch_args, walk_dicts)
from .device_augment_config import use_device_augmentation
from .process_group import leave_process_group, leave_process_group_at_exit
from .setup_env import register_all_modules

__all__ = [
    'load_from_local', 'register_checkpoint_loader', 'trusted_globals',
    'fill_pretrained', 'patch_adjust_hue', 'register_config_package',
    'register_all_modules', 'fill_data_root', 'labelled_folder_classes',
    'enabled_default_hooks', 'leave_process_group',
    'leave_process_group_at_exit', 'use_device_augmentation', 'walk_dicts',
    'parse_launch_args'
]
