# Copyright (c) mocoplug contributors. All rights reserved.
"""The compatibility patches ``import mocoplug`` applies, each stated once.

1. :mod:`mocoplug_site.checkpoint`: torch >= 2.6 loads with
   ``weights_only=True``, which refuses the message hub objects mmengine
   0.10.7 writes into its own checkpoints; mmengine's local loader is
   replaced by one that allows exactly those types
   (``MOCOPLUG_TRUST_CHECKPOINTS=1`` lifts the limit).
2. :mod:`.mmcv_hue`: mmcv 2.1.0's ``adjust_hue`` overflows under
   numpy >= 2 on a negative hue shift; it is replaced by the same code with
   the shift wrapped modulo 256 (only where numpy shows the problem).
3. :mod:`.config_package`: mmengine resolves ``package::path`` bases only
   for the packages it knows; ``mocoplug::`` is added.
4. mmcv-lite's warning that ``MultiScaleDeformableAttention`` needs the
   full mmcv is silenced: no mocoplug component uses that op.
5. :mod:`.mmcv_ops`: without a compiled ``mmcv._ext`` (mmcv-lite),
   torchvision and torch serve the kernels that mmdet's model zoo calls,
   so detection needs nothing compiled.

1 and 5 also act in processes that never import mocoplug, through the
import hook of :mod:`mocoplug_site` that installing mocoplug sets up.
6. :mod:`.mmpretrain_multimodal`: mmpretrain 1.2's multimodal models do not
   import under transformers 5, which breaks ``import mmpretrain.models``;
   they are switched off there.
"""
import warnings

from mocoplug_site.checkpoint import (load_from_local,
                                      register_checkpoint_loader,
                                      trusted_globals)
from .config_package import register_config_package
from .mmcv_hue import patch_adjust_hue
from .mmcv_ops import serve_mmcv_ops
from .mmpretrain_multimodal import skip_broken_multimodal


def silence_mmcv_lite_warning() -> None:
    """Hide mmcv-lite's ``MultiScaleDeformableAttention`` import warning,
    which mmpretrain's models trigger in every pretraining log."""
    warnings.filterwarnings(
        'ignore',
        message='Fail to import ``MultiScaleDeformableAttention``',
        category=UserWarning,
        module='mmcv.cnn.bricks.transformer')


def apply_patches() -> None:
    """Apply patches 1-6 (each is idempotent)."""
    register_checkpoint_loader()
    patch_adjust_hue()
    register_config_package()
    silence_mmcv_lite_warning()
    serve_mmcv_ops()
    skip_broken_multimodal()


apply_patches()

__all__ = [
    'apply_patches', 'load_from_local', 'patch_adjust_hue',
    'register_checkpoint_loader', 'register_config_package', 'serve_mmcv_ops',
    'silence_mmcv_lite_warning', 'skip_broken_multimodal', 'trusted_globals'
]
