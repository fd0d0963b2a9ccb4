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


RES2_4 = ['conv1.', 'bn1.', 'layer1.', 'layer2.', 'layer3.']


class Res5(BaseModule):
    """Like a C4 shared head: ``layer4`` and a new norm after it."""

    def __init__(self, init_cfg):
        super().__init__(init_cfg=init_cfg)
        self.layer4 = ResNet(depth=50).layer4
        self.norm = nn.BatchNorm2d(2048)


def test_part_of_a_backbone_is_stated_in_its_init_cfg(moco_checkpoint):
    path, moco = moco_checkpoint
    head = Res5(dict(moco_init(path), unread=RES2_4, keep_init=['norm.']))
    head.init_weights()
    assert torch.equal(head.layer4[0].conv1.weight,
                       moco.backbone.layer4[0].conv1.weight)
    assert torch.equal(head.norm.weight, torch.ones(2048))  # its init
    # the same module with the partial load unstated: refused, naming both
    for stated, named in ((dict(keep_init=['norm.']), 'conv1.*'),
                          (dict(unread=RES2_4), '50/54')):
        head = Res5(dict(moco_init(path), **stated))
        with pytest.raises(ValueError, match='keep_init=') as info:
            head.init_weights()
        assert named in str(info.value)


def test_nothing_or_part_loaded_wrong_prefix_or_no_checkpoint_are_errors(
        moco_checkpoint):
    path, _ = moco_checkpoint
    with DefaultScope.overwrite_default_scope('mocoplug'):
        with pytest.raises(ValueError, match='no known key layout'):
            initialize(nn.Linear(3, 3), moco_init(path))
        with pytest.raises(ValueError, match='module.encoder_q'):
            initialize(nn.Linear(3, 3), moco_init(path, 'encoder.'))
        with pytest.raises(ValueError, match='pretrained=PATH'):
            initialize(nn.Linear(3, 3), moco_init(None))


def test_a_resnet18_checkpoint_into_resnet50_is_refused(tmp_path):
    """The issue's case: 97 of 318 tensors share name and shape (the stem,
    and BN layers of equal width); mmengine's loader would load those and
    leave the rest at random init."""
    torch.manual_seed(0)
    r18 = ResNet(depth=18)
    path = tmp_path / 'r18.pth'
    torch.save(
        dict(state_dict={
            f'backbone.{k}': v
            for k, v in r18.state_dict().items()
        }), path)
    r50 = ResNet(depth=50, init_cfg=moco_init(str(path)))
    before = {k: v.clone() for k, v in r50.state_dict().items()}
    with pytest.raises(ValueError) as info:
        r50.init_weights()
    message = str(info.value)
    for part in ('no known key layout', 'mocoplug / mmpretrain', '/265',
                 'official MoCo v1/v2', 'no place', 'ResNet'):
        assert part in message, part
    for name, value in r50.state_dict().items():  # nothing was loaded
        assert torch.equal(value, before[name]), name


def test_official_checkpoints_load_through_the_configs_prefix(tmp_path):
    """A config's prefix='backbone.' with the official v1/v2 layout
    (module.encoder_q.*, fc the MLP): the known layout is found."""
    torch.manual_seed(0)
    source = ResNet(depth=18)
    state = {
        f'module.encoder_q.{k}': v
        for k, v in source.state_dict().items()
    }
    state.update({
        f'module.encoder_k.{k}': -v
        for k, v in source.state_dict().items()
    })
    state['module.encoder_q.fc.0.weight'] = torch.zeros(4, 512)
    state['module.queue'] = torch.zeros(128, 16)
    path = tmp_path / 'moco_v2_800ep_pretrain.pth.tar'
    torch.save(dict(arch='resnet18', state_dict=state), path)
    target = ResNet(depth=18, init_cfg=moco_init(str(path)))
    target.init_weights()
    assert_loaded(target, source.state_dict())


def test_official_v3_vit_loads_into_the_linear_config(tmp_path):
    """timm names (vits.py), mapped as encoders_from maps them, into the
    backbone of configs/benchmarks/linear_mocov3-vit-small-*.py."""
    from ..algorithms.test_mocov3 import TINY_VIT
    from .test_encoder_checkpoint import official_vit_checkpoint
    path, vit, _, _ = official_vit_checkpoint(tmp_path)
    cfg = Config.fromfile('configs/benchmarks/'
                          'linear_mocov3-vit-small-p16_8xb128-coslr-90e_'
                          'in1k.py')
    backbone = dict(
        cfg.model.backbone,
        **{
            k: v
            for k, v in TINY_VIT.items() if k != 'type'
        },
        frozen_stages=2)
    backbone['init_cfg'] = dict(backbone['init_cfg'], checkpoint=path)
    from mocoplug.registry import MODELS
    target = MODELS.build(backbone)
    target.init_weights()
    assert_loaded(target, vit.state_dict())


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


def test_a_c4_detector_checkpoint_into_a_resnet50_is_refused(
        moco_checkpoint, tmp_path):
    """A C4 detector keeps res5 in roi_head.shared_head: given to kNN, the
    backbone's layer4 stayed random."""
    _, moco = moco_checkpoint
    state = {}
    for key, value in moco.backbone.state_dict().items():
        where = 'roi_head.shared_head.' if key.startswith('layer4.') \
            else 'backbone.'
        state[where + key] = value
    path = tmp_path / 'faster_rcnn_c4.pth'
    torch.save(dict(state_dict=state), path)
    r50 = ResNet(depth=50, init_cfg=moco_init(str(path)))
    with pytest.raises(ValueError, match=r'\(backbone\.\): 215/265'):
        r50.init_weights()


def test_a_whole_classifier_and_a_stated_keep_init_load(tmp_path):
    """A module with a classifier of its own (an ImageClassifier's state
    without prefix) takes its head.* too; keep_init keys present in the
    checkpoint are left at their init, not refused."""
    from mmpretrain.models import ImageClassifier
    torch.manual_seed(0)

    def classifier(**init):
        return ImageClassifier(
            backbone=dict(type='ResNet', depth=18),
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=3, in_channels=512),
            init_cfg=init or None)

    source = classifier()
    path = tmp_path / 'classifier.pth'
    torch.save(dict(state_dict=source.state_dict()), path)
    target = classifier(**moco_init(str(path), prefix=''))
    target.init_weights()
    assert_loaded(target, source.state_dict())
    fresh = classifier(**moco_init(str(path), prefix=''), keep_init=['head.'])
    fresh.init_weights()  # the head: its own init_cfg, N(0, 0.01)
    assert not torch.equal(fresh.head.fc.weight, source.head.fc.weight)
    assert fresh.head.fc.weight.std() < 0.02
    assert torch.equal(fresh.backbone.conv1.weight,
                       source.backbone.conv1.weight)
