# Copyright (c) mocoplug contributors. All rights reserved.
"""The compatibility patches ``import mocoplug`` applies
(docs/design_notes.md#compatibility-patches)."""
import warnings

from mocoplug_site.checkpoint import (load_from_local,
                                      register_checkpoint_loader,
                                      trusted_globals)
from .config_package import register_config_package
from .mmcv_hue import patch_adjust_hue
from .mmcv_ops import serve_mmcv_ops
from .mmpretrain_multimodal import skip_broken_multimodal


def silence_mmcv_lite_warning() -> None:
    """Hide mmcv-lite's ``MultiScaleDeformableAttention`` import warning."""
    warnings.filterwarnings(
        'ignore', 'Fail to import ``MultiScaleDeformableAttention``',
        UserWarning, 'mmcv.cnn.bricks.transformer')


def apply_patches() -> None:
    """Apply the patches (each is idempotent)."""
    for patch in (register_checkpoint_loader, patch_adjust_hue,
                  register_config_package, silence_mmcv_lite_warning,
                  serve_mmcv_ops, skip_broken_multimodal):
        patch()


apply_patches()

__all__ = [
    'apply_patches', 'load_from_local', 'patch_adjust_hue',
    'register_checkpoint_loader', 'register_config_package', 'serve_mmcv_ops',
    'silence_mmcv_lite_warning', 'skip_broken_multimodal', 'trusted_globals'
]
