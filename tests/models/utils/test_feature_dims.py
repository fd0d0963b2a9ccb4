# Copyright (c) mocoplug contributors. All rights reserved.
"""Backbone -> neck -> predictor -> queue channels, checked when a MoCo
model is built (before any data is loaded)."""
import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModule

import mocoplug.models.utils.feature_dims as feature_dims
from mocoplug.models import MoCo, MoCoV3
from mocoplug.models.utils import check_feature_dims
from mocoplug.registry import MODELS

RESNET = dict(
    type='ResNet',
    depth=18,
    stem_channels=16,
    base_channels=16,
    out_indices=(3, ))  # outputs 128 channels
VIT = dict(
    type='MoCoV3ViT',
    arch=dict(
        embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
    img_size=224,  # probed at 32 px: the position embedding is resized
    patch_size=16)


def mlp(in_channels, out_channels, avg_pool=True):
    return dict(
        type='MoCoProjectionNeck',
        in_channels=in_channels,
        hid_channels=32,
        out_channels=out_channels,
        with_bn=True,
        with_avg_pool=avg_pool)


def moco(**kwargs):
    cfg = dict(
        backbone=RESNET,
        neck=mlp(128, 64),
        head=dict(type='InfoNCEHead', temperature=0.2),
        queue=dict(type='NegativeKeyQueue', size=32, dim=64),
        shuffle_bn='none')
    cfg.update(kwargs)
    return MoCo(**cfg)


def mocov3(**kwargs):
    cfg = dict(
        backbone=RESNET,
        neck=mlp(128, 16),
        predictor=mlp(16, 16, avg_pool=False),
        head=dict(type='InfoNCEHead', temperature=1.0))
    cfg.update(kwargs)
    return MoCoV3(**cfg)


def test_matching_dims_build():
    assert moco().queue.dim == 64
    vit = mocov3(backbone=VIT, neck=mlp(32, 16, avg_pool=False))
    assert vit.neck.mlp[0].in_features == 32


def test_moco_queue_dim_vs_neck_out_channels():
    # the case: model.queue.dim=32 with a 64-d neck
    with pytest.raises(ValueError) as err:
        moco(queue=dict(type='NegativeKeyQueue', size=32, dim=32))
    assert str(err.value) == (
        'MoCo: model.queue.dim=32 but model.neck outputs 64-d keys (its '
        'out_channels): set model.queue.dim=64, or '
        'model.neck.out_channels=32.')


def test_backbone_channels_vs_neck_in_channels():
    with pytest.raises(ValueError) as err:
        moco(neck=mlp(2048, 64))  # an R50 neck on a ResNet-18
    msg = str(err.value)
    assert msg.startswith(
        'MoCo: model.neck (MoCoProjectionNeck) cannot take the output of '
        'model.backbone (ResNet), feature maps of shape(s) (128, 1, 1) '
        '(channels first, batch left out): set model.neck.in_channels=128')
    assert 'mat1 and mat2 shapes cannot be multiplied' in msg  # torch's
    # a backbone with several outputs
    with pytest.raises(
            ValueError,
            match=r'shape\(s\) \(16, 8, 8\), .*'
            r'\(128, 1, 1\).*out_indices=\(3, \)'):
        moco(backbone=dict(RESNET, out_indices=(0, 1, 2, 3)))
    # ViT: the class token's width
    with pytest.raises(
            ValueError,
            match=r'MoCoV3: model.neck .* shape\(s\) '
            r'\(48,\) .*set model.neck.in_channels=48'):
        mocov3(
            backbone=dict(VIT, arch=dict(VIT['arch'], embed_dims=48)),
            neck=mlp(32, 16, avg_pool=False))


def test_mocov3_predictor_and_queue():
    with pytest.raises(
            ValueError,
            match=r'model.predictor \(MoCoProjection'
            r'Neck\) cannot take the 16-d output of model.neck: '
            r'set model.predictor.in_channels=16'):
        mocov3(predictor=mlp(256, 16, avg_pool=False))
    with pytest.raises(ValueError) as err:
        mocov3(predictor=mlp(16, 8, avg_pool=False))
    assert str(err.value) == (
        'MoCoV3: model.predictor outputs 8-d queries but the momentum '
        'branch (backbone + neck) outputs 16-d keys, and each query is '
        'compared with a key: set model.predictor.out_channels=16 (the '
        "neck's out_channels).")
    with pytest.raises(ValueError, match='set model.queue.dim=16'):
        mocov3(queue=dict(type='NegativeKeyQueue', size=8, dim=256))


def test_probe_changes_no_state_and_no_random_stream():
    torch.manual_seed(0)
    backbone, neck = MODELS.build(RESNET), MODELS.build(mlp(128, 64))
    backbone.train()
    neck.layer_to_check = nn.Dropout()  # an extra module, in train mode
    state = {k: v.clone() for k, v in backbone.state_dict().items()}
    rng = torch.get_rng_state()
    check_feature_dims('MoCo', backbone, neck)
    assert torch.equal(torch.get_rng_state(), rng)
    for k, v in backbone.state_dict().items():
        assert torch.equal(v, state[k]), k  # BN statistics untouched
    assert backbone.training and neck.training
    assert neck.layer_to_check.training and backbone.layer1.training


def test_undeterminable_backbone_is_logged_not_silent(monkeypatch):

    @MODELS.register_module(force=True)
    class NeedsTokens(BaseModule):

        def forward(self, x):
            raise TypeError('expects token ids')

    logged = []
    monkeypatch.setattr(feature_dims, 'print_log',
                        lambda msg, **kw: logged.append(msg))
    model = moco(backbone=dict(type='NeedsTokens'))  # builds
    assert isinstance(model, MoCo)
    assert logged == [
        'MoCo: the neck/queue dimensions were not checked at construction: '
        'the backbone (NeedsTokens) did not run on a zero 1x3x32x32 or '
        '224x224 image (TypeError: expects token ids); a mismatch will show '
        'at the first training step.'
    ]
