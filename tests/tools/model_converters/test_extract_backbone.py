# Copyright (c) mocoplug contributors. All rights reserved.
import pickle

import pytest
import torch
import torchvision

from mocoplug.models import MoCo

EXTRACT = 'model_converters/extract_backbone'


@pytest.fixture(scope='module')
def r18_moco_checkpoint(tmp_path_factory):
    """A MoCo checkpoint with a torchvision-layout ResNet-18 backbone whose
    key encoder differs from its query encoder."""
    model = MoCo(
        backbone=dict(type='ResNet', depth=18, out_indices=(3, )),
        neck=dict(
            type='MoCoProjectionNeck',
            in_channels=512,
            hid_channels=64,
            out_channels=16),
        head=dict(type='InfoNCEHead'),
        queue=dict(type='NegativeKeyQueue', size=8, dim=16))
    model.init_weights()
    with torch.no_grad():
        for p in model.momentum_encoder.parameters():
            p.add_(1.0)
    path = tmp_path_factory.mktemp('ckpt') / 'moco.pth'
    torch.save(dict(state_dict=model.state_dict(), meta=dict(epoch=1)), path)
    return str(path), model


def test_mmpretrain_format_keeps_backbone_keys_of_the_query_encoder(
        tmp_path, load_tool, r18_moco_checkpoint):
    path, model = r18_moco_checkpoint
    out = tmp_path / 'r18.pth'
    load_tool(EXTRACT).main([path, str(out)])
    state = torch.load(out)['state_dict']
    assert set(state) == {f'backbone.{k}' for k in model.backbone.state_dict()}
    for k, v in model.backbone.state_dict().items():
        assert torch.equal(state[f'backbone.{k}'], v)


def test_torchvision_format_loads_into_resnet18(tmp_path, load_tool,
                                                r18_moco_checkpoint):
    path, model = r18_moco_checkpoint
    out = tmp_path / 'tv.pth'
    load_tool(EXTRACT).main([path, str(out), '--format', 'torchvision'])
    net = torchvision.models.resnet18()
    result = net.load_state_dict(torch.load(out), strict=False)
    assert sorted(result.missing_keys) == ['fc.bias', 'fc.weight']
    assert result.unexpected_keys == []
    assert torch.equal(net.layer2[0].downsample[1].running_var,
                       model.backbone.layer2[0].downsample[1].running_var)


def test_detectron2_format_names(tmp_path, load_tool, r18_moco_checkpoint):
    path, model = r18_moco_checkpoint
    out = tmp_path / 'd2.pkl'
    load_tool(EXTRACT).main([path, str(out), '--format', 'detectron2'])
    with open(out, 'rb') as f:
        d2 = pickle.load(f)
    assert d2['matching_heuristics'] is True
    names = d2['model']
    assert 'stem.conv1.weight' in names and 'stem.conv1.norm.weight' in names
    assert 'res2.0.conv1.weight' in names and 'res2.0.conv2.norm.bias' in names
    assert 'res3.0.shortcut.weight' in names
    assert 'res3.0.shortcut.norm.running_mean' in names
    assert (names['res5.1.conv2.weight'] ==
            model.backbone.layer4[1].conv2.weight.detach().numpy()).all()


def test_official_prefix_drops_the_mlp_head(tmp_path, load_tool):
    state = {
        'module.encoder_q.conv1.weight': torch.ones(2),
        'module.encoder_q.fc.0.weight': torch.ones(2),
        'module.encoder_k.conv1.weight': torch.zeros(2),
        'module.queue': torch.zeros(2, 2),
    }
    src, out = tmp_path / 'official.pth.tar', tmp_path / 'out.pth'
    torch.save(dict(state_dict=state, arch='resnet50'), src)
    backbone = load_tool(EXTRACT).main([str(src), str(out)])
    assert list(backbone) == ['conv1.weight']
    assert torch.equal(backbone['conv1.weight'], torch.ones(2))


def test_checkpoint_without_query_encoder_is_refused(tmp_path, load_tool):
    src = tmp_path / 'key_only.pth'
    torch.save(
        dict(state_dict={'momentum_encoder.backbone.w': torch.ones(1)}), src)
    with pytest.raises(ValueError, match='No query-encoder weights'):
        load_tool(EXTRACT).main([str(src), str(tmp_path / 'o')])


def test_an_existing_output_is_never_replaced_silently(tmp_path, load_tool,
                                                       r18_moco_checkpoint):
    path, _ = r18_moco_checkpoint
    with pytest.raises(SystemExit, match='exists and is the checkpoint read'):
        load_tool(EXTRACT).main([path, path, '--overwrite'])
    out = tmp_path / 'r18.pth'
    out.write_bytes(b'a file of the user')
    with pytest.raises(SystemExit, match='exists: --overwrite replaces it'):
        load_tool(EXTRACT).main([path, str(out)])
    assert out.read_bytes() == b'a file of the user'
    load_tool(EXTRACT).main([path, str(out), '--overwrite'])
    assert 'state_dict' in torch.load(out)


def test_official_v3_vit_exports_mmpretrain_names_only(tmp_path, load_tool):
    """The official MoCo v3 ViT (timm names): --format mmpretrain writes
    mmpretrain's names, which the linear config's backbone loads whole;
    torchvision's and detectron2's formats, which hold a ResNet, refuse."""
    from mocoplug.registry import MODELS
    from ...models.algorithms.test_mocov3 import TINY_VIT
    from ...models.utils.test_encoder_checkpoint import official_vit_checkpoint
    path, vit, _, _ = official_vit_checkpoint(tmp_path)
    out = tmp_path / 'vit.pth'
    load_tool(EXTRACT).main([path, str(out)])
    saved = torch.load(out)['state_dict']
    assert set(saved) == {f'backbone.{k}' for k in vit.state_dict()}
    target = MODELS.build(
        dict(
            TINY_VIT,
            init_cfg=dict(
                type='Pretrained',
                _scope_='mocoplug',
                checkpoint=str(out),
                prefix='backbone.')))
    target.init_weights()
    for name, value in vit.state_dict().items():
        assert torch.equal(target.state_dict()[name], value), name
    for fmt in ('torchvision', 'detectron2'):
        with pytest.raises(SystemExit, match='use --format mmpretrain'):
            load_tool(EXTRACT).main(
                [path, str(tmp_path / f'vit.{fmt}'), '--format', fmt])
        assert not (tmp_path / f'vit.{fmt}').exists()
