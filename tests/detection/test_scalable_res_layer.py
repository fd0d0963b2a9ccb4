# Copyright (c) mocoplug contributors. All rights reserved.
"""ScalableResLayerExtraNorm: ResLayerExtraNorm at base width 64, and a
slim backbone's res5 at any other width."""
import torch
from mmengine.registry import init_default_scope
from mmpretrain.models import ResNet


def _build(**kwargs):
    from mmdet.registry import MODELS

    import mocoplug.detection  # noqa: F401
    init_default_scope('mmdet')
    return MODELS.build(dict(stage=3, norm_eval=False, **kwargs))


def test_width_64_is_res_layer_extra_norm():
    ours = _build(type='ScalableResLayerExtraNorm', depth=50)
    theirs = _build(type='ResLayerExtraNorm', depth=50)
    assert {
        k: v.shape
        for k, v in ours.state_dict().items()
    } == {
        k: v.shape
        for k, v in theirs.state_dict().items()
    }


def test_slim_res5_takes_the_pretrained_stage():
    head = _build(type='ScalableResLayerExtraNorm', depth=18, base_channels=16)
    backbone = ResNet(depth=18, base_channels=16, stem_channels=16)
    layer4 = {
        k: v
        for k, v in backbone.state_dict().items() if k.startswith('layer4.')
    }
    missing, unexpected = head.load_state_dict(layer4, strict=False)
    assert not unexpected
    # all but the extra norm (not in a classification backbone)
    assert sorted(missing) == [
        'norm.bias', 'norm.running_mean', 'norm.running_var', 'norm.weight'
    ]
    out = head(torch.randn(2, 64, 7, 7))
    assert out.shape == (2, 128, 4, 4)
