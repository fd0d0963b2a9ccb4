# Copyright (c) mocoplug contributors. All rights reserved.
import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.model import BaseModule, initialize
from mmengine.model.weight_init import PretrainedInit
from mmengine.registry import DefaultScope
from mmpretrain.models import MoCoV3ViT, ResNet

from mocoplug.models import MoCo, MoCoPretrainedInit
from mocoplug.utils import fill_pretrained


def moco_init(path, prefix='backbone.'):
    return dict(
        type='Pretrained', _scope_='mocoplug', checkpoint=path, prefix=prefix)


@pytest.fixture
def moco_checkpoint(tmp_path):
    """A MoCo R50 checkpoint whose key encoder differs from its query
    encoder and whose BN weights are all non-trivial (so zero-init or
    one-init of any of them would show)."""
    torch.manual_seed(0)
    model = MoCo(
        backbone=dict(type='ResNet', depth=50, out_indices=(3, )),
        neck=dict(
            type='MoCoProjectionNeck',
            in_channels=2048,
            hid_channels=64,
            out_channels=16),
        head=dict(type='InfoNCEHead'),
        queue=dict(type='NegativeKeyQueue', size=8, dim=16))
    with torch.no_grad():
        for p in model.backbone.parameters():
            p.uniform_(0.5, 1.5)
        for p in model.momentum_encoder.parameters():
            p.uniform_(-1.5, -0.5)
    path = tmp_path / 'moco.pth'
    torch.save(dict(state_dict=model.state_dict(), meta=dict()), path)
    return str(path), model


def assert_loaded(module, state):
    for name, tensor in module.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def test_registered_as_pretrained_in_mocoplug_scope_only():
    from mmengine.registry import WEIGHT_INITIALIZERS
    assert issubclass(MoCoPretrainedInit, PretrainedInit)
    with WEIGHT_INITIALIZERS.switch_scope_and_registry('mocoplug') as reg:
        assert reg.get('Pretrained') is MoCoPretrainedInit
    with WEIGHT_INITIALIZERS.switch_scope_and_registry('mmdet') as reg:
        assert reg.get('Pretrained') is PretrainedInit


def test_resnet_gets_the_query_encoder_and_keeps_it(moco_checkpoint):
    """Applied after the backbone's own init: mmpretrain's ResNet would
    otherwise zero the last BN of every block (zero_init_residual)."""
    path, moco = moco_checkpoint
    backbone = ResNet(
        depth=50, zero_init_residual=True, init_cfg=moco_init(path))
    backbone.init_weights()
    assert_loaded(backbone, moco.backbone.state_dict())
    assert not torch.equal(backbone.conv1.weight,
                           moco.momentum_encoder.backbone.conv1.weight)


def test_vit_keeps_the_loaded_weights(tmp_path):
    """MoCoV3ViT re-initialises its embeddings and layers unless its
    init_cfg is of type 'Pretrained'."""
    torch.manual_seed(0)
    source = MoCoV3ViT(arch='mocov3-small', img_size=32, patch_size=16)
    state = {f'backbone.{k}': v for k, v in source.state_dict().items()}
    path = tmp_path / 'vit.pth'
    torch.save(dict(state_dict=state), path)
    vit = MoCoV3ViT(
        arch='mocov3-small',
        img_size=32,
        patch_size=16,
        stop_grad_conv1=True,
        init_cfg=moco_init(str(path)))
    vit.init_weights()
    assert_loaded(vit, source.state_dict())


def test_part_of_a_backbone_takes_its_keys(moco_checkpoint):
    """Like a C4 shared head: a module holding only `layer4`."""
    path, moco = moco_checkpoint

    class Res5(BaseModule):

        def __init__(self):
            super().__init__(init_cfg=moco_init(path))
            self.layer4 = ResNet(depth=50).layer4

    head = Res5()
    head.init_weights()
    assert torch.equal(head.layer4[0].conv1.weight,
                       moco.backbone.layer4[0].conv1.weight)


def test_nothing_loaded_wrong_prefix_or_no_checkpoint_are_errors(
        moco_checkpoint):
    path, _ = moco_checkpoint
    with DefaultScope.overwrite_default_scope('mocoplug'):
        with pytest.raises(RuntimeError, match='none of its'):
            initialize(nn.Linear(3, 3), moco_init(path))
        with pytest.raises(ValueError, match='module.encoder_q'):
            initialize(nn.Linear(3, 3), moco_init(path, 'encoder.'))
        with pytest.raises(ValueError, match='pretrained=PATH'):
            initialize(nn.Linear(3, 3), moco_init(None))


def test_no_prefix_loads_a_plain_state_dict(tmp_path):
    source = nn.Linear(3, 2)
    path = tmp_path / 'plain.pth'
    torch.save({
        f'module.{k}': v
        for k, v in source.state_dict().items()
    }, path)
    target = nn.Linear(3, 2)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        initialize(target, moco_init(str(path), prefix=None))
    assert_loaded(target, source.state_dict())


def test_fill_pretrained_reaches_every_mocoplug_initialiser():
    cfg = Config(
        dict(
            pretrained='a.pth',
            model=dict(
                backbone=dict(init_cfg=moco_init(None)),
                roi_head=dict(shared_head=dict(init_cfg=[moco_init(None)])),
                neck=dict(
                    init_cfg=dict(type='Pretrained', checkpoint='x.pth')))))
    assert fill_pretrained(cfg) == 2
    assert cfg.model.backbone.init_cfg.checkpoint == 'a.pth'
    assert cfg.model.roi_head.shared_head.init_cfg[0].checkpoint == 'a.pth'
    assert cfg.model.neck.init_cfg.checkpoint == 'x.pth'  # not mocoplug's
    assert fill_pretrained(Config(dict(model=dict()))) == 0
    with pytest.raises(ValueError, match="mocoplug's Pretrained"):
        fill_pretrained(Config(dict(pretrained='a.pth', model=dict())))
