# Copyright (c) mocoplug contributors. All rights reserved.
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from mocoplug.utils import register_all_modules


def test_register_all_modules_sets_the_scope(monkeypatch):
    monkeypatch.setattr(DefaultScope, '_instance_dict', {})
    register_all_modules()
    assert DefaultScope.get_current_instance().scope_name == 'mocoplug'
    # built through mmengine's root registry, as a Runner would
    from mocoplug.registry import MODELS
    with MODELS.switch_scope_and_registry(None) as registry:
        assert registry.scope == 'mocoplug'
        assert registry.get('MoCo').__module__ == (
            'mocoplug.models.algorithms.moco')
        assert registry.get('ResNet').__module__.startswith('mmpretrain')
    # mocoplug's nodes are children of mmpretrain's: reachable by prefix
    assert MMPRETRAIN_MODELS.get('mocoplug.NegativeKeyQueue').__name__ == \
        'NegativeKeyQueue'
