# Copyright (c) mocoplug contributors. All rights reserved.
"""Continued pretraining (``model.encoders_from``): each released key
layout, written by the test from one reference network, starts both
encoders with the reference's values; the projection where it fits."""
import pytest
import torch
import torch.nn as nn
import torchvision

from mocoplug.registry import MODELS

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
        'official-v3':
        dict(
            state_dict={
                **{
                    f'module.base_encoder.{n}': v
                    for n, v in q.items()
                },
                **{
                    f'module.momentum_encoder.{n}': v
                    for n, v in k.items()
                }, 'module.predictor.0.weight': torch.zeros(512, 128)
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
    'official-v1v2', 'official-v3', 'mocoplug-mmpretrain', 'torchvision',
    'extracted-backbone'
])
def test_each_layout_starts_both_encoders(tmp_path, layout):
    q, k = reference()
    path = str(tmp_path / f'{layout}.pth')
    torch.save(layouts(q, k)[layout], path)
    model = moco(path)
    for encoder in (model.backbone, model.momentum_encoder.backbone):
        state = encoder.state_dict()
        for name, value in state.items():
            if not name.endswith('num_batches_tracked'):
                assert torch.equal(value, q[name]), name
    mlp = [v for n, v in q.items() if n.startswith('fc.')]
    with_projection = layout not in ('torchvision', 'extracted-backbone')
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
