# Copyright (c) mocoplug contributors. All rights reserved.
"""``import mocoplug`` has applied every patch that mocoplug.compat states,
and the names stay importable from mocoplug.utils."""
import warnings

import mmcv
import numpy as np
from mmengine.config import utils as config_utils
from mmengine.runner.checkpoint import CheckpointLoader

import mocoplug  # noqa: F401
from mocoplug import compat
from mocoplug.compat.mmcv_hue import adjust_hue, needs_hue_patch


def test_every_patch_is_applied_on_import():
    # 1. mmengine's local checkpoint loader is ours
    assert CheckpointLoader._schemes[''] is compat.load_from_local
    # 2. mmcv's adjust_hue wraps a negative shift (where numpy needs it)
    if needs_hue_patch():
        assert mmcv.image.photometric.adjust_hue is adjust_hue
    img = np.full((1, 1, 3), 128, np.uint8)
    img[0, 0, 0] = 255  # a blue pixel has a hue to shift
    mmcv.image.photometric.adjust_hue(img, -0.1, backend='cv2')
    # 3. configs can inherit mocoplug::dir/config.py
    assert config_utils.MODULE2PACKAGE['mocoplug'] == 'mocoplug'
    # 4. the mmcv-lite warning is filtered, other warnings are not
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('default')
        compat.silence_mmcv_lite_warning()
        warnings.warn_explicit(
            'Fail to import ``MultiScaleDeformableAttention`` from '
            '``mmcv.ops.multi_scale_deform_attn``', UserWarning, 'x.py', 1,
            'mmcv.cnn.bricks.transformer')
        warnings.warn_explicit('another warning', UserWarning, 'x.py', 2,
                               'mmcv.cnn.bricks.transformer')
    assert [str(w.message) for w in caught] == ['another warning']


def test_apply_patches_is_idempotent():
    compat.apply_patches()
    compat.apply_patches()
    assert CheckpointLoader._schemes[''] is compat.load_from_local


def test_old_names_stay_importable_from_utils():
    from mocoplug import utils
    for name in ('load_from_local', 'register_checkpoint_loader',
                 'trusted_globals', 'patch_adjust_hue',
                 'register_config_package'):
        assert getattr(utils, name) is getattr(compat, name)
    from mocoplug.datasets import fill_data_root, labelled_folder_classes
    assert utils.fill_data_root is fill_data_root
    assert utils.labelled_folder_classes is labelled_folder_classes
