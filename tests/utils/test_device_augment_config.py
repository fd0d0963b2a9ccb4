# Copyright (c) mocoplug contributors. All rights reserved.
import os.path as osp

import pytest
from mmengine.config import Config
from mmengine.dataset import Compose
from mmengine.registry import DefaultScope

from mocoplug.registry import MODELS
from mocoplug.utils import use_device_augmentation

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SWITCHED = [
    ('mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py',
     'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-aug.py', False),
    ('mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py',
     'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-decode.py', True),
    ('mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py',
     'mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k_device-aug.py', False),
    ('mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py',
     'mocov2/'
     'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits_device-aug.py',
     False),
]


def load(name):
    return Config.fromfile(osp.join(ROOT, 'configs', name))


def plain(value):
    """Config values as plain data, without mmengine's `_scope_` tags."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != '_scope_'}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@pytest.mark.parametrize('recipe,switched_config,decode', SWITCHED)
def test_device_configs_are_the_recipes_switched(recipe, switched_config,
                                                 decode):
    """Each *_device-aug / *_device-decode config is its recipe with only
    the pipeline's view step and the data preprocessor changed (the same
    views, mean, std and channel order), as use_device_augmentation does;
    both halves build."""
    switched = use_device_augmentation(load(recipe), decode_on_device=decode)
    written = load(switched_config)
    pipeline = plain(written.train_dataloader.dataset.pipeline)
    assert plain(switched.train_dataloader.dataset.pipeline) == pipeline
    assert plain(switched.data_preprocessor) == plain(
        written.data_preprocessor)
    original = load(recipe)
    assert plain(written.model) == plain(original.model)
    assert plain(written.optim_wrapper) == plain(original.optim_wrapper)
    norm = plain(original.data_preprocessor)
    for key in ('mean', 'std', 'to_rgb'):
        assert plain(written.data_preprocessor)[key] == norm[key]
    with DefaultScope.overwrite_default_scope('mocoplug'):
        Compose(pipeline)
        MODELS.build(written.data_preprocessor)


def test_clear_errors():
    cfg = load('mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py')
    cfg.train_dataloader.dataset.pipeline = [dict(type='PackInputs')]
    with pytest.raises(ValueError, match='exactly one MultiView'):
        use_device_augmentation(cfg)
    cfg = load(
        'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
    with pytest.raises(ValueError, match='decode_on_device needs'):
        use_device_augmentation(cfg, decode_on_device=True)
    cfg.data_preprocessor.type = 'TwoNormDataPreprocessor'
    with pytest.raises(ValueError, match='TwoNormDataPreprocessor'):
        use_device_augmentation(cfg)
