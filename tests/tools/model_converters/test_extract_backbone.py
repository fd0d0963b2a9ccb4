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


def test_timm_format_loads_strictly_and_computes_the_same(
        tmp_path, load_tool, r18_moco_checkpoint):
    """ResNet-18 into timm's resnet18 and the official v3 ViT (timm names
    renamed to mmpretrain's and back) into timm's VisionTransformer:
    strict loads, and the features equal mmpretrain's backbone's."""
    timm = pytest.importorskip('timm')
    from ...models.utils.test_encoder_checkpoint import official_vit_checkpoint
    path, model = r18_moco_checkpoint
    out = tmp_path / 'r18_timm.pth'
    load_tool(EXTRACT).main([path, str(out), '--format', 'timm'])
    net = timm.create_model('resnet18', pretrained=False, num_classes=0)
    net.load_state_dict(torch.load(out), strict=True)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    net.eval(), model.eval()
    with torch.no_grad():
        ours = model.backbone(x)[-1].mean((2, 3))
        # the same convolutions and BN in the same order: float32 round-off
        # of sums over at most 4608 products, relative ~1e-5 at most
        torch.testing.assert_close(net(x), ours, rtol=1e-5, atol=1e-5)
    vit_path, vit, _, _ = official_vit_checkpoint(tmp_path)
    out = tmp_path / 'vit_timm.pth'
    load_tool(EXTRACT).main([vit_path, str(out), '--format', 'timm'])
    net = timm.models.VisionTransformer(
        img_size=32,
        patch_size=16,
        embed_dim=32,
        depth=2,
        num_heads=2,
        mlp_ratio=2,
        num_classes=0)
    exported = torch.load(out)
    net.load_state_dict(exported, strict=True)
    official = torch.load(vit_path)['state_dict']
    start = 'module.base_encoder.'  # the official names, round-tripped
    kept = {
        k[len(start):]: v
        for k, v in official.items()
        if k.startswith(start) and not k.startswith(start + 'head.')
    }
    assert exported.keys() == kept.keys()
    assert all(torch.equal(exported[k], kept[k]) for k in kept)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    net.eval(), vit.eval()
    with torch.no_grad():
        # attention in another kernel (fused against unfused): float32
        # round-off over 5 tokens x 32 dims, values O(1): < 1e-5
        torch.testing.assert_close(
            net.forward_features(x)[:, 0], vit(x)[0], rtol=1e-4, atol=1e-5)
    bad = tmp_path / 'vit_without_final_norm.pth'
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v
                for k, v in vit.state_dict().items()
                if not k.startswith('ln1.')
            }), bad)
    with pytest.raises(SystemExit, match="not timm's layout"):
        load_tool(EXTRACT).main(
            [str(bad), str(tmp_path / 'x.pth'), '--format', 'timm'])


def onnx_outputs(path, x):
    ort = pytest.importorskip('onnxruntime')
    session = ort.InferenceSession(str(path))
    assert [i.name for i in session.get_inputs()] == ['images']
    return session.run(None, {'images': x.numpy()})


def test_onnx_format_runs_in_onnxruntime_as_the_backbone(
        tmp_path, load_tool, r18_moco_checkpoint):
    """ResNet-18 from the checkpoint's own config (as training writes it),
    the same checkpoint without a config (a torchvision ResNet: pooled
    features), and the official v3 ViT with --config: onnxruntime's outputs
    equal the PyTorch backbone's on a batch of another size than the
    export's (the batch dimension is dynamic)."""
    pytest.importorskip('onnx')
    from mmengine.config import Config

    from ...models.algorithms.test_mocov3 import TINY_VIT
    from ...models.utils.test_encoder_checkpoint import official_vit_checkpoint
    path, model = r18_moco_checkpoint
    with_cfg = tmp_path / 'with_cfg.pth'
    cfg = Config(
        dict(
            default_scope='mocoplug',
            model=dict(
                backbone=dict(type='ResNet', depth=18, out_indices=(3, )))))
    torch.save(
        dict(
            state_dict=torch.load(path)['state_dict'],
            meta=dict(cfg=cfg.pretty_text)), with_cfg)
    x = torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        maps = model.backbone(x)[-1]
    # onnxruntime's convolutions sum in another order (im2col blocks,
    # FMA): float32 round-off of sums of <= 4608 products per layer over
    # 18 layers, values O(1): relative 1e-4 bounds it with room
    for name, ckpt, expected in (('cfg', with_cfg, maps), ('tv', path,
                                                           maps.mean((2, 3)))):
        out = tmp_path / f'{name}.onnx'
        load_tool(EXTRACT).main(
            [str(ckpt),
             str(out), '--format', 'onnx', '--size', '64'])
        got, = onnx_outputs(out, x)
        torch.testing.assert_close(
            torch.from_numpy(got), expected, rtol=1e-4, atol=1e-4)
    vit_path, vit, _, _ = official_vit_checkpoint(tmp_path)
    config = tmp_path / 'vit.py'
    Config(dict(model=dict(backbone=TINY_VIT))).dump(str(config))
    out = tmp_path / 'vit.onnx'
    load_tool(EXTRACT).main([
        vit_path,
        str(out), '--format', 'onnx', '--config',
        str(config), '--size', '32'
    ])
    x = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    vit.eval()
    with torch.no_grad():
        expected = vit(x)
    got = onnx_outputs(out, x)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):
        # attention and layer norms in other kernels: float32 round-off over
        # 5 tokens x 32 dims, values O(1)
        torch.testing.assert_close(
            torch.from_numpy(ours), theirs, rtol=1e-4, atol=1e-5)
    # a config of another network is refused, naming --config; the onnx
    # options are refused with the other formats
    with pytest.raises(SystemExit, match='pass --config'):
        load_tool(EXTRACT).main([
            path,
            str(tmp_path / 'x.onnx'), '--format', 'onnx', '--config',
            str(config)
        ])
    with pytest.raises(SystemExit):
        load_tool(EXTRACT).main(
            [path, str(tmp_path / 'x.pth'), '--size', '64'])
    assert not (tmp_path / 'x.onnx').exists()


def test_a_bare_timm_resnet_of_13_bands_is_read_in_every_format(
        tmp_path, load_tool):
    """torchgeo's SSL4EO-S12 MoCo weights' layout: a bare timm ResNet state
    dict of 13 bands (its classifier kept), every tensor random. mmpretrain's
    ResNet with ``in_channels=13`` loads the mmpretrain format strictly and
    computes timm's features; timm's ``in_chans=13`` model loads the timm
    format strictly, torchvision's ResNet with a 13-band stem the
    torchvision format; a bare timm ViT of 4 bands goes to timm's names."""
    timm = pytest.importorskip('timm')
    from mmpretrain.models import ResNet

    from ...models.utils.test_encoder_checkpoint import randomize
    source = timm.create_model('resnet18', pretrained=False, in_chans=13)
    randomize(source, 0)  # (timm zeroes each block's last BN weight)
    path = tmp_path / 'resnet18_sentinel2_all_moco.pth'
    torch.save(source.state_dict(), path)
    outs = {}
    for kind in ('mmpretrain', 'timm', 'torchvision'):
        outs[kind] = tmp_path / f'{kind}.pth'
        load_tool(EXTRACT).main([str(path), str(outs[kind]), '--format', kind])
    ours = ResNet(depth=18, in_channels=13)
    ours.load_state_dict({
        k[len('backbone.'):]: v
        for k, v in torch.load(outs['mmpretrain'])['state_dict'].items()
    })
    timm_net = timm.create_model(
        'resnet18', pretrained=False, num_classes=0, in_chans=13)
    timm_net.load_state_dict(torch.load(outs['timm']), strict=True)
    net = torchvision.models.resnet18()
    net.conv1 = torch.nn.Conv2d(13, 64, 7, 2, 3, bias=False)
    result = net.load_state_dict(torch.load(outs['torchvision']), strict=False)
    assert sorted(result.missing_keys) == ['fc.bias', 'fc.weight']
    assert result.unexpected_keys == []
    x = torch.randn(2, 13, 64, 64, generator=torch.Generator().manual_seed(0))
    for module in (source, ours, timm_net, net):
        module.eval()
    net.fc = torch.nn.Identity()
    source.reset_classifier(0)
    with torch.no_grad():
        want = source(x)
        # the same convolutions and BN in the same order (as above)
        for got in (ours(x)[-1].mean((2, 3)), timm_net(x), net(x)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    vit = timm.models.VisionTransformer(
        img_size=32,
        patch_size=16,
        embed_dim=32,
        depth=2,
        num_heads=2,
        in_chans=4,
        num_classes=0)
    torch.save(vit.state_dict(), path)
    out = tmp_path / 'vit_timm.pth'
    load_tool(EXTRACT).main([str(path), str(out), '--format', 'timm'])
    again = timm.models.VisionTransformer(
        img_size=32,
        patch_size=16,
        embed_dim=32,
        depth=2,
        num_heads=2,
        in_chans=4,
        num_classes=0)
    again.load_state_dict(torch.load(out), strict=True)
    for name, value in vit.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name
