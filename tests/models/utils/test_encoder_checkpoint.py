# Copyright (c) mocoplug contributors. All rights reserved.
"""Continued pretraining (``model.encoders_from``): each released key
layout, written by the test from one reference network, starts both
encoders with the reference's values; the projection where it fits."""
import logging
import re

import pytest
import torch
import torch.nn as nn
import torchvision
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from mocoplug.models.utils import encoder_checkpoint
from mocoplug.registry import MODELS
from ..algorithms.test_mocov3 import TINY_VIT as VIT

NECK = dict(
    type='MoCoProjectionNeck',
    in_channels=512,
    hid_channels=512,
    out_channels=128,
    num_layers=2,
    with_bias=True,
    with_bn=False,
    with_last_bn=False)


def reference():
    """A ResNet-18 whose fc is MoCo v2's MLP (the official encoder_q),
    random weights and BN statistics, and a second one (the key encoder of
    the released checkpoint, which must not be read)."""
    nets = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        net = torchvision.models.resnet18()
        net.fc = nn.Sequential(
            nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 128))
        for name, buf in net.named_buffers():
            if 'running' in name:
                buf.uniform_(0.5, 1.5)
        nets.append(net.state_dict())
    return nets


def capture_log(monkeypatch):
    """The (level, message) pairs the loader logs."""
    logs = []
    monkeypatch.setattr(
        encoder_checkpoint,
        'print_log',
        lambda msg, logger=None, level=logging.INFO: logs.append((level, msg)))
    return logs


def warnings(logs):
    return [msg for level, msg in logs if level >= logging.WARNING]


def layouts(q, k):
    """Checkpoint dicts in each released layout."""
    backbone = {n: v for n, v in q.items() if not n.startswith('fc.')}
    mlp = [v for n, v in q.items() if n.startswith('fc.')]
    neck = dict(
        zip(['mlp.0.weight', 'mlp.0.bias', 'mlp.2.weight', 'mlp.2.bias'], mlp))
    classifier = dict(
        backbone, **{
            'fc.weight': torch.zeros(1000, 512),
            'fc.bias': torch.zeros(1000)
        })
    return {
        'official-v1v2':
        dict(
            state_dict={
                **{
                    f'module.encoder_q.{n}': v
                    for n, v in q.items()
                },
                **{
                    f'module.encoder_k.{n}': v
                    for n, v in k.items()
                }, 'module.queue': torch.zeros(128, 32)
            }),
        'mocoplug-mmpretrain':
        dict(
            state_dict={
                **{
                    f'backbone.{n}': v
                    for n, v in backbone.items()
                },
                **{
                    f'neck.{n}': v
                    for n, v in neck.items()
                },
                **{
                    f'momentum_encoder.backbone.{n}': v
                    for n, v in k.items() if not n.startswith('fc.')
                }, 'queue.keys': torch.zeros(32, 128)
            }),
        'torchvision':
        classifier,
        'extracted-backbone':
        dict(state_dict=backbone),
        # a torchvision classifier saved inside nn.DataParallel
        'dataparallel': {
            f'module.{n}': v
            for n, v in classifier.items()
        },
    }


def moco(path):
    model = MODELS.build(
        dict(
            type='MoCo',
            backbone=dict(type='mmpretrain.ResNet', depth=18),
            neck=NECK,
            head=dict(type='InfoNCEHead', temperature=0.2),
            queue=dict(type='NegativeKeyQueue', size=32, dim=128),
            shuffle_bn='none',
            encoders_from=path))
    model.init_weights()
    return model


@pytest.mark.parametrize('layout', [
    'official-v1v2', 'mocoplug-mmpretrain', 'torchvision',
    'extracted-backbone', 'dataparallel'
])
def test_each_layout_starts_both_encoders(tmp_path, monkeypatch, layout):
    q, k = reference()
    path = str(tmp_path / f'{layout}.pth')
    torch.save(layouts(q, k)[layout], path)
    logs = capture_log(monkeypatch)
    model = moco(path)
    # the key encoder, the queue and a classifier are left on purpose
    assert not warnings(logs), logs
    for encoder in (model.backbone, model.momentum_encoder.backbone):
        state = encoder.state_dict()
        for name, value in state.items():
            if not name.endswith('num_batches_tracked'):
                assert torch.equal(value, q[name]), name
    mlp = [v for n, v in q.items() if n.startswith('fc.')]
    with_projection = layout in ('official-v1v2', 'mocoplug-mmpretrain')
    for neck in (model.neck, model.momentum_encoder.neck):
        loaded = [
            torch.equal(a, b) for a, b in zip(neck.state_dict().values(), mlp)
        ]
        assert all(loaded) if with_projection else not any(loaded)
    assert torch.equal(
        model.neck.state_dict()['mlp.0.weight'],
        model.momentum_encoder.neck.state_dict()['mlp.0.weight'])


def test_unknown_layout_names_the_prefixes_found(tmp_path):
    q, _ = reference()
    path = str(tmp_path / 'other.pth')
    torch.save({f'encoder.trunk.{n}': v for n, v in q.items()}, path)
    with pytest.raises(ValueError) as info:
        moco(path)
    for part in ('encoder.trunk.*', 'module.encoder_q.', 'backbone.',
                 'official MoCo v3', 'ResNet'):
        assert part in str(info.value), part
    # a checkpoint of another depth: the shapes do not fit either
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet34().state_dict(), path)
    with pytest.raises(ValueError, match='no known key layout'):
        moco(path)


# MoCo v3 (facebookresearch/moco-v3): moco/builder.py's MoCo_ResNet and
# MoCo_ViT, vits.py's timm ViT; small widths, the official structure.
HID, DIM = 64, 16
# mmpretrain's VisionTransformer -> timm's VisionTransformer names, the
# inverse of the loader's map, written from the two definitions
TO_TIMM = [(r'^patch_embed\.projection\.', 'patch_embed.proj.'),
           (r'^layers\.(\d+)\.ln(\d)\.', r'blocks.\1.norm\2.'),
           (r'^layers\.(\d+)\.attn\.', r'blocks.\1.attn.'),
           (r'^layers\.(\d+)\.ffn\.layers\.0\.0\.', r'blocks.\1.mlp.fc1.'),
           (r'^layers\.(\d+)\.ffn\.layers\.1\.', r'blocks.\1.mlp.fc2.'),
           (r'^ln1\.', 'norm.')]
TIMM_BLOCK = [
    'norm1.weight', 'norm1.bias', 'attn.qkv.weight', 'attn.qkv.bias',
    'attn.proj.weight', 'attn.proj.bias', 'norm2.weight', 'norm2.bias',
    'mlp.fc1.weight', 'mlp.fc1.bias', 'mlp.fc2.weight', 'mlp.fc2.bias'
]
TIMM_VIT_KEYS = {
    'cls_token', 'pos_embed', 'patch_embed.proj.weight',
    'patch_embed.proj.bias', 'norm.weight', 'norm.bias'
} | {f'blocks.{i}.{n}'
     for i in range(2)
     for n in TIMM_BLOCK}


def build_mlp(num_layers, dim_in, last_bn=True):
    """moco/builder.py's ``_build_mlp(num_layers, dim_in, HID, DIM,
    last_bn)``: Linear without bias, BN, ReLU, ..., affine-free last BN."""
    layers = []
    for i in range(num_layers):
        last = i == num_layers - 1
        layers.append(
            nn.Linear(dim_in if i == 0 else HID, DIM if last else HID, False))
        if not last:
            layers += [nn.BatchNorm1d(HID), nn.ReLU(inplace=True)]
        elif last_bn:
            layers.append(nn.BatchNorm1d(DIM, affine=False))
    return nn.Sequential(*layers)


def randomize(module, seed):
    """Distinct random values in every tensor (BN statistics, counters,
    class token, position embedding included)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for value in module.state_dict().values():
            if value.is_floating_point():
                value.uniform_(0.5, 1.5)
            else:
                value.fill_(seed + 3)
    return module


def mocov3(path, backbone, in_channels, vit):
    """mocoplug's MoCoV3 as configs/_base_/models/mocov3.py (ResNet: 2-layer
    projector, predictor without last BN; ViT: 3 layers, last BN)."""
    neck = dict(
        type='MoCoProjectionNeck',
        in_channels=in_channels,
        hid_channels=HID,
        out_channels=DIM,
        num_layers=3 if vit else 2,
        with_bias=False,
        with_bn=True,
        with_last_bn=True,
        with_last_bn_affine=False,
        with_avg_pool=not vit)
    model = MODELS.build(
        dict(
            type='MoCoV3',
            backbone=backbone,
            neck=neck,
            predictor=dict(
                neck,
                in_channels=DIM,
                num_layers=2,
                with_last_bn=vit,
                with_avg_pool=False),
            head=dict(type='InfoNCEHead', temperature=0.2),
            encoders_from=path))
    model.init_weights()
    return model


def assert_equal(module, reference, names=None):
    """Every tensor of ``module`` equals ``reference``'s (``names``: the
    reference's name of each of ``module``'s, else the same)."""
    have, want = module.state_dict(), reference.state_dict()
    names = names or {n: n for n in have}
    assert len(have) == len(want)
    for name, value in have.items():
        assert torch.equal(value, want[names[name]]), name


def mlp_names(module):
    """MoCoProjectionNeck's ``mlp.N.x`` for the official ``N.x``."""
    return {n: n[len('mlp.'):] for n in module.state_dict()}


def resnet18_v3(seed):
    """The official MoCo_ResNet base encoder: fc is the BN projector."""
    net = torchvision.models.resnet18()
    net.fc = build_mlp(2, 512)
    return randomize(net, seed)


def test_official_v3_resnet_loads_projector_and_predictor(
        tmp_path, monkeypatch):
    base, momentum = resnet18_v3(0), resnet18_v3(1)
    predictor = randomize(build_mlp(2, DIM, last_bn=False), 2)
    state = {
        f'module.base_encoder.{n}': v
        for n, v in base.state_dict().items()
    }
    state.update({
        f'module.momentum_encoder.{n}': v
        for n, v in momentum.state_dict().items()
    })
    state.update({
        f'module.predictor.{n}': v
        for n, v in predictor.state_dict().items()
    })
    path = str(tmp_path / 'r-50-300ep.pth.tar')
    torch.save(dict(epoch=300, arch='resnet50', state_dict=state), path)
    logs = capture_log(monkeypatch)
    model = mocov3(path, dict(type='mmpretrain.ResNet', depth=18), 512, False)
    want = base.state_dict()
    for encoder in (model.backbone, model.momentum_encoder.backbone):
        for name, value in encoder.state_dict().items():
            if not name.endswith('num_batches_tracked'):
                assert torch.equal(value, want[name]), name
    for neck in (model.neck, model.momentum_encoder.neck):
        assert_equal(neck, base.fc, mlp_names(neck))
    assert_equal(model.predictor, predictor, mlp_names(model.predictor))
    assert not warnings(logs), logs


def tiny_vit():
    vit = MODELS.build(VIT)
    vit.init_weights()
    return vit


def official_vit_checkpoint(tmp_path):
    """An official MoCo_ViT checkpoint (timm names) from a tiny mmpretrain
    ViT renamed back; returns the path, the ViT, projector and predictor."""
    vits = [randomize(tiny_vit(), seed) for seed in (0, 1)]
    heads = [randomize(build_mlp(3, 32), seed) for seed in (2, 3)]
    predictor = randomize(build_mlp(2, DIM), 4)
    state = {}
    for where, vit, head in zip(('base_encoder', 'momentum_encoder'), vits,
                                heads):
        timm = {}
        for name, value in vit.state_dict().items():
            for pattern, repl in TO_TIMM:
                name = re.sub(pattern, repl, name)
            timm[name] = value
        assert set(timm) == TIMM_VIT_KEYS
        timm.update({f'head.{n}': v for n, v in head.state_dict().items()})
        state.update({f'module.{where}.{n}': v for n, v in timm.items()})
    state.update({
        f'module.predictor.{n}': v
        for n, v in predictor.state_dict().items()
    })
    path = str(tmp_path / 'vit-s-300ep.pth.tar')
    torch.save(dict(arch='vit_small', state_dict=state), path)
    return path, vits[0], heads[0], predictor


def test_official_v3_vit_maps_timm_names(tmp_path, monkeypatch):
    path, vit, head, predictor = official_vit_checkpoint(tmp_path)
    logs = capture_log(monkeypatch)
    model = mocov3(path, VIT, 32, True)
    for encoder in (model.backbone, model.momentum_encoder.backbone):
        assert_equal(encoder, vit)  # all, and by name these three:
        # the class token, the (cls + patches) position embedding, qkv
        for name in ('cls_token', 'pos_embed', 'layers.1.attn.qkv.weight'):
            assert torch.equal(encoder.state_dict()[name],
                               vit.state_dict()[name])
    assert not model.backbone.pos_embed.requires_grad  # still fixed
    x = torch.randn(2, 3, 32, 32)
    vit.eval()
    model.backbone.eval()
    assert torch.equal(model.backbone(x)[0], vit(x)[0])
    for neck in (model.neck, model.momentum_encoder.neck):
        assert_equal(neck, head, mlp_names(neck))
    assert_equal(model.predictor, predictor, mlp_names(model.predictor))
    assert not warnings(logs), logs


@pytest.mark.parametrize('backbone, names', [
    (dict(img_size=48), ('pos_embed', 'img_size')),
    (dict(final_norm=False), ('ln1.weight', 'final_norm=True')),
])
def test_official_v3_vit_refuses_what_does_not_map(tmp_path, backbone, names):
    path, *_ = official_vit_checkpoint(tmp_path)
    with pytest.raises(ValueError) as info:
        mocov3(path, dict(VIT, **backbone), 32, True)
    for part in (f'encoders_from={path!r}', 'MoCoV3ViT', 'convert') + names:
        assert part in str(info.value), part


def test_mmpretrain_v3_necks_load_in_order(tmp_path, monkeypatch):
    """mmpretrain's MoCo v3: NonLinearNeck (fc0, bn0, ...) as the neck and
    MoCoV3Head's predictor, the key encoder in an EMA wrapper."""
    net = resnet18_v3(0)
    nonlinear = dict(
        type='NonLinearNeck',
        hid_channels=HID,
        out_channels=DIM,
        num_layers=2,
        with_bias=False,
        norm_cfg=dict(type='BN1d'))
    neck = randomize(
        MMPRETRAIN_MODELS.build(
            dict(
                nonlinear,
                in_channels=512,
                with_last_bn=True,
                with_last_bn_affine=False)), 1)
    predictor = randomize(
        MMPRETRAIN_MODELS.build(
            dict(
                nonlinear,
                in_channels=DIM,
                with_last_bn=False,
                with_avg_pool=False)), 2)
    assert 'fc0.weight' in neck.state_dict()
    state = {
        f'backbone.{n}': v
        for n, v in net.state_dict().items() if not n.startswith('fc.')
    }
    state.update({f'neck.{n}': v for n, v in neck.state_dict().items()})
    state.update({
        f'head.predictor.{n}': v
        for n, v in predictor.state_dict().items()
    })
    state.update({
        f'momentum_encoder.module.0.{n}': v * 2
        for n, v in net.state_dict().items() if not n.startswith('fc.')
    })
    state['momentum_encoder.steps'] = torch.tensor(7)
    path = str(tmp_path / 'mmpretrain-mocov3.pth')
    torch.save(dict(meta={}, state_dict=state), path)
    logs = capture_log(monkeypatch)
    model = mocov3(path, dict(type='mmpretrain.ResNet', depth=18), 512, False)
    in_order = {
        n: m
        for n, m in zip(model.neck.state_dict(), neck.state_dict())
    }
    for module in (model.neck, model.momentum_encoder.neck):
        assert_equal(module, neck, in_order)
    assert_equal(
        model.predictor, predictor,
        dict(zip(model.predictor.state_dict(), predictor.state_dict())))
    assert not warnings(logs), logs


def test_tensors_not_loaded_are_warned(tmp_path, monkeypatch):
    q, k = reference()
    checkpoint = layouts(q, k)['official-v1v2']
    checkpoint['state_dict'].update({
        'module.foo.weight': torch.zeros(3),
        'module.foo.bias': torch.zeros(3)
    })
    path = str(tmp_path / 'extra.pth')
    torch.save(checkpoint, path)
    logs = capture_log(monkeypatch)
    moco(path)
    assert len(warnings(logs)) == 1 and 'module.foo' in warnings(logs)[0]
    assert 'encoder_k' not in warnings(logs)[0]
    # a MoCo v3 checkpoint into MoCo v2: its BN projector does not fit the
    # neck and the model has no predictor
    base = resnet18_v3(0)
    state = {
        f'module.base_encoder.{n}': v
        for n, v in base.state_dict().items()
    }
    state['module.predictor.0.weight'] = torch.zeros(HID, DIM)
    torch.save(dict(state_dict=state), path)
    logs = capture_log(monkeypatch)
    moco(path)
    (warning, ) = warnings(logs)
    for part in ('module.base_encoder.fc.*', 'module.predictor.0.*'):
        assert part in warning, (part, warning)


def test_adapt_stem_is_timms_rule_on_a_hand_computed_case():
    weight = torch.arange(6.).view(2, 3, 1, 1)  # out 2, RGB
    adapt = encoder_checkpoint.adapt_stem
    assert adapt(weight, 1).flatten().tolist() == [3., 12.]  # summed
    assert adapt(weight, 2).flatten().tolist() == [0., 1.5, 4.5, 6.]
    assert adapt(weight, 4).flatten().tolist() == [
        0., .75, 1.5, 0., 2.25, 3., 3.75, 2.25
    ]  # R G B R, x 3/4
    # a grey image (one value in every band) gets the RGB response where
    # the bands are whole repeats of RGB
    assert torch.allclose(
        adapt(weight, 6).sum((1, 2, 3)), weight.sum((1, 2, 3)))


@pytest.mark.parametrize('bands', [1, 4])
def test_rgb_weights_start_an_n_band_stem_by_the_rule(tmp_path, monkeypatch,
                                                      bands):
    """encoders_from with a 3-band checkpoint into a model of ``bands``:
    the stem by :func:`adapt_stem`, every other tensor as saved, logged."""

    def build(in_channels, path=None):
        model = MODELS.build(
            dict(
                type='MoCo',
                backbone=dict(
                    type='SmallConvNet',
                    in_channels=in_channels,
                    channels=(8, 16, 16, 32),
                    pool_after=(0, 1, 2)),
                neck=dict(
                    type='MoCoProjectionNeck',
                    in_channels=32,
                    hid_channels=32,
                    out_channels=16),
                head=dict(type='InfoNCEHead', temperature=0.2),
                queue=dict(type='NegativeKeyQueue', size=8, dim=16),
                shuffle_bn='none',
                encoders_from=path))
        model.init_weights()
        return model

    rgb = build(3)
    path = str(tmp_path / 'rgb.pth')
    torch.save(dict(state_dict=rgb.state_dict()), path)
    logs = capture_log(monkeypatch)
    model = build(bands, path)
    expected = encoder_checkpoint.adapt_stem(
        rgb.backbone.state_dict()['layers.0.weight'], bands)
    for encoder in (model.backbone, model.momentum_encoder.backbone):
        for name, tensor in encoder.state_dict().items():
            want = expected if name == 'layers.0.weight' else \
                rgb.backbone.state_dict()[name]
            assert torch.equal(tensor, want), name
    assert any(f'layers.0.weight: RGB weights adapted to {bands} bands' in m
               for _, m in logs)


@pytest.mark.parametrize('bands, saved', [(13, 13), (4, 3)])
def test_timm_resnet_layout_starts_an_n_band_stem(tmp_path, monkeypatch, bands,
                                                  saved):
    """A bare timm ResNet state dict (the layout of torchgeo's SSL4EO-S12
    MoCo weights, ``timm.create_model('resnet18', in_chans=13)``, its
    classifier kept) starts a ResNet of ``bands`` bands: as saved where the
    stem has the bands, else an RGB stem by :func:`adapt_stem`."""
    timm = pytest.importorskip('timm')
    torch.manual_seed(0)
    net = timm.create_model('resnet18', pretrained=False, in_chans=saved)
    state = randomize(net, 0).state_dict()
    path = str(tmp_path / 'resnet18_sentinel2_all_moco.pth')
    torch.save(state, path)
    logs = capture_log(monkeypatch)
    model = MODELS.build(
        dict(
            type='MoCo',
            backbone=dict(
                type='mmpretrain.ResNet', depth=18, in_channels=bands),
            neck=NECK,
            head=dict(type='InfoNCEHead', temperature=0.2),
            queue=dict(type='NegativeKeyQueue', size=32, dim=128),
            shuffle_bn='none',
            encoders_from=path))
    model.init_weights()
    want = dict(state)
    if saved != bands:
        want['conv1.weight'] = encoder_checkpoint.adapt_stem(
            state['conv1.weight'], bands)
    for encoder in (model.backbone, model.momentum_encoder.backbone):
        for name, value in encoder.state_dict().items():
            assert torch.equal(value, want[name]), name
    assert (f'conv1.weight: RGB weights adapted to {bands} bands'
            in ' '.join(m for _, m in logs)) == (
                saved != bands)
    assert not warnings(logs), logs
    if saved != 3:  # a stem of other bands than the saved, not RGB
        other = MODELS.build(
            dict(type='mmpretrain.ResNet', depth=18, in_channels=saved + 1))
        with pytest.raises(ValueError, match='no known key layout.*conv1'):
            encoder_checkpoint.fit_layout(
                state, other, 'encoders_from', stems=[])


def test_official_v3_vit_starts_an_n_band_patch_embedding(
        tmp_path, monkeypatch):
    """The official RGB ViT into ``in_channels=4``: the patch embedding by
    :func:`adapt_stem`, every other tensor as saved."""
    path, vit, *_ = official_vit_checkpoint(tmp_path)
    logs = capture_log(monkeypatch)
    model = mocov3(path, dict(VIT, in_channels=4), 32, True)
    stem = 'patch_embed.projection.weight'
    want = dict(vit.state_dict())
    want[stem] = encoder_checkpoint.adapt_stem(want[stem], 4)
    for encoder in (model.backbone, model.momentum_encoder.backbone):
        assert encoder.state_dict()[stem].shape[1] == 4
        for name, value in encoder.state_dict().items():
            assert torch.equal(value, want[name]), name
    assert any(f'{stem}: RGB weights adapted to 4 bands' in m for _, m in logs)
