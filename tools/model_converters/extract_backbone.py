# Copyright (c) mocoplug contributors. All rights reserved.
"""Extract the query encoder's backbone from a MoCo checkpoint (mocoplug's,
mmpretrain's, mmselfsup's or the official one) as mmpretrain, torchvision,
detectron2 or timm weights, or as ONNX (docs/user_guides/evaluation.md)."""
import argparse
import os
import os.path as osp
import pickle
import re
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner.checkpoint import _load_checkpoint

import mocoplug  # noqa: F401  (mmengine checkpoints under torch >= 2.6)
from mocoplug.models.utils.encoder_checkpoint import (LAYOUTS, UNREAD, _under,
                                                      fit_layout, rename_vit)
from mocoplug.registry import MODELS

FORMATS = ('mmpretrain', 'torchvision', 'detectron2', 'timm', 'onnx')


def query_backbone(
        state: Dict[str, torch.Tensor],
        prefix: Optional[str] = None) -> Tuple[Dict[str, torch.Tensor], str]:
    """The query encoder's backbone tensors, prefix removed: under
    ``prefix``, else the first of the loader's ``LAYOUTS`` that has them
    (less their projection head or classifier; a key encoder never), a
    bare ResNet or ViT among them (timm's, torchvision's: torchgeo's)."""
    bare = 'conv1.weight' in state or {  # a ResNet's stem, a ViT's
        'patch_embed.proj.weight', 'cls_token', 'blocks.0.attn.qkv.weight'
    } <= set(state)
    candidates = [(lay[1], lay[4]) for lay in LAYOUTS if lay[1] or bare]
    if prefix:
        candidates = [(prefix, ('fc.', 'head.'))]
    for cand, skip in candidates:
        found = _under(state, cand, skip)
        found = {k: v for k, v in found.items() if not k.startswith(UNREAD)}
        if 'patch_embed.proj.weight' in found:  # the official v3 ViT
            found = rename_vit(found)
        if found:
            return OrderedDict(found), cand
    starts = sorted({k.split('.')[0] for k in state})
    raise ValueError(
        'No query-encoder weights in this checkpoint: no key starts with '
        f'{" or ".join(repr(c) for c, _ in candidates)} (its keys start with '
        f'{starts}). Pass --prefix with the query encoder\'s prefix; the key '
        'encoder is never exported.')


def to_detectron2(backbone: Dict[str, torch.Tensor]) -> Dict[str, object]:
    """Rename torchvision-style ResNet keys as detectron2 does."""
    out = OrderedDict()
    for key, value in backbone.items():
        if not key.startswith('layer'):
            key = 'stem.' + key
        key = re.sub(r'layer(\d)', lambda m: f'res{int(m.group(1)) + 1}', key)
        key = re.sub(r'bn(\d)', r'conv\1.norm', key)
        key = key.replace('downsample.0',
                          'shortcut').replace('downsample.1', 'shortcut.norm')
        out[key] = value.detach().cpu().numpy()
    return out


def torchvision_resnet(backbone: Dict[str, torch.Tensor]) -> tuple:
    """The torchvision ResNet that takes every tensor of ``backbone`` (its
    ``fc`` aside) and its name, or SystemExit: torchvision's and
    detectron2's formats hold nothing else."""
    import torchvision
    blocks = {i for k in backbone for i in re.findall(r'^layer3\.(\d+)\.', k)}
    bottleneck = any('conv3' in k for k in backbone)
    depths = {(6, True): 50, (23, True): 101, (36, True): 152}
    depths.update({(2, False): 18, (6, False): 34})  # BasicBlock
    depth = depths.get((len(blocks), bottleneck))
    name = f'resnet{depth or 50}'
    net = getattr(torchvision.models, name)()
    bands = backbone.get('conv1.weight', net.conv1.weight).shape[1]
    if bands != 3:  # torchvision's stem at the bands of the backbone's
        net.conv1 = torch.nn.Conv2d(bands, 64, 7, 2, 3, bias=False)
    try:  # the loader's rule: every tensor but the classifier
        fit_layout(
            backbone, net, f'torchvision {name}', '', keep_init=('fc.', ))
    except ValueError as error:
        raise SystemExit(
            "torchvision's and detectron2's formats hold a torchvision "
            f'ResNet, which this backbone is not ({error}): use --format '
            "mmpretrain, read by init_cfg=dict(type='Pretrained', "
            "prefix='backbone.').") from None
    return net, f'resnet{depth}'


def in_chans(stem: torch.Tensor) -> str:
    """timm's ``in_chans`` argument for a stem of other than 3 bands."""
    return '' if stem.shape[1] == 3 else f', in_chans={stem.shape[1]}'


def to_timm(backbone: Dict[str, torch.Tensor]) -> Tuple[dict, str]:
    """timm's names and the model that takes them whole: a torchvision
    ResNet as timm's ``resnet*`` (the same names), mmpretrain's ViT as
    timm's ``VisionTransformer``; SystemExit for anything else."""
    if 'patch_embed.projection.weight' not in backbone:
        depth = torchvision_resnet(backbone)[1]
        return dict(backbone), (f"timm.create_model('{depth}', num_classes=0"
                                f"{in_chans(backbone['conv1.weight'])})")
    out = rename_vit(backbone, to_timm=True)
    parts = ('cls_token', 'pos_embed', 'patch_embed.proj.', 'blocks.', 'norm.')
    unknown = [k for k in out if not k.startswith(parts)]
    if unknown or 'norm.weight' not in out:
        raise SystemExit(
            "--format timm: this ViT is not timm's layout (a final norm, "
            f'no other parts): {unknown[:4] or "no final norm (ln1)"}')
    dim, _, patch, _ = out['patch_embed.proj.weight'].shape
    chans = in_chans(out['patch_embed.proj.weight'])
    side = round((out['pos_embed'].shape[1] - 1)**0.5) * patch
    depth = len({k.split('.')[1] for k in out if k.startswith('blocks.')})
    name = {(384, 12): 'vit_small', (768, 12): 'vit_base'}.get((dim, depth))
    return out, (f"timm.create_model('{name}_patch{patch}_{side}', "
                 f'num_classes=0{chans})' if name else
                 f'timm.models.VisionTransformer(img_size={side}, '
                 f'patch_size={patch}, embed_dim={dim}, depth={depth}, '
                 f'num_heads=<the checkpoint\'s>, num_classes=0{chans})')


class _Outputs(torch.nn.Module):
    """The backbone's outputs as a tuple of tensors."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> tuple:
        out = self.net(images)
        return tuple(out) if isinstance(out, (tuple, list)) else (out, )


def to_onnx(backbone: Dict[str, torch.Tensor], config: Optional[str],
            ckpt: dict, path: str, size: int) -> str:
    """The backbone as ONNX (batch dimension dynamic): ``model.backbone`` of
    ``config`` (default: the config in the checkpoint's meta) loaded with
    every tensor (strict), else the torchvision ResNet that takes them (its
    pooled features: ``fc`` left out)."""
    text = config or (ckpt.get('meta') or {}).get('cfg')
    if text:
        source = 'model.backbone of ' + (config or "the checkpoint's config")
        try:
            cfg = Config.fromfile(config) if config else Config.fromstring(
                text, '.py')
            with DefaultScope.overwrite_default_scope(
                    cfg.get('default_scope', 'mocoplug')):
                net = MODELS.build(cfg.model.backbone)
            net.load_state_dict(backbone, strict=True)
        except Exception as error:
            raise SystemExit(f'--format onnx: {source} does not take this '
                             f'backbone ({type(error).__name__}: {error}); '
                             'pass --config with its pretraining config')
    else:
        net, source = torchvision_resnet(backbone)
        result = net.load_state_dict(backbone, strict=False)
        left = [k for k in result.missing_keys if not k.startswith('fc.')]
        assert not left and not result.unexpected_keys, result
        net.fc = torch.nn.Identity()
    module = _Outputs(net)
    module.eval()  # (mmpretrain's train() returns None: no chaining)
    channels = next(v for v in module.state_dict().values()
                    if v.dim() == 4).shape[1]
    images = torch.zeros(2, channels, size, size)
    names = [f'features_{i}' for i in range(len(module(images)))]
    batch = {n: {0: 'batch'} for n in ['images'] + names}
    torch.onnx.export(
        module, (images, ),
        path,
        input_names=['images'],
        output_names=names,
        dynamic_axes=batch,
        dynamo=False)
    return (f'{source}: input images (batch, {channels}, {size}, {size}), '
            f'outputs {", ".join(names)}')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('checkpoint', help='MoCo checkpoint')
    parser.add_argument('out', help='output file')
    parser.add_argument('--format', choices=FORMATS, default='mmpretrain')
    parser.add_argument(
        '--prefix', help='query-encoder key prefix (default: detected)')
    parser.add_argument(
        '--overwrite', action='store_true', help='replace an existing out')
    parser.add_argument(
        '--config',
        help="onnx: the backbone's config (default: the "
        "checkpoint's)")
    parser.add_argument('--size', type=int, help='onnx: input (224)')
    args = parser.parse_args(argv)
    if args.format != 'onnx' and (args.config or args.size):
        parser.error('--config and --size are options of --format onnx')
    same = osp.exists(args.out) and osp.exists(
        args.checkpoint) and osp.samefile(args.out, args.checkpoint)
    if same or (osp.exists(args.out) and not args.overwrite):
        raise SystemExit(f'{args.out} exists' +
                         (' and is the checkpoint read'
                          if same else ': --overwrite replaces it'))

    ckpt = _load_checkpoint(args.checkpoint, map_location='cpu')
    state = ckpt.get('state_dict', ckpt.get('model', ckpt)) \
        if isinstance(ckpt, dict) else None
    if not isinstance(state, dict):
        raise SystemExit(f'{args.checkpoint} holds no state dict')
    backbone, prefix = query_backbone(state, args.prefix)
    print(f'query encoder: {len(backbone)} tensors under {prefix!r}; '
          f'left out {len(state) - len(backbone)} others (key encoder, neck,'
          ' queue, ...)')
    if args.format == 'timm':
        backbone, target = to_timm(backbone)
        print(f'timm: every tensor fits {target} (load_state_dict strict)')
    elif args.format in ('torchvision', 'detectron2'):
        name = torchvision_resnet(backbone)[1]
        print(f'torchvision {name}: every tensor fits')

    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    meta = dict(source=osp.abspath(args.checkpoint), prefix=prefix)
    if args.format == 'mmpretrain':
        weights = OrderedDict(
            (f'backbone.{k}', v) for k, v in backbone.items())
        torch.save(dict(state_dict=weights, meta=meta), args.out)
    elif args.format in ('torchvision', 'timm'):
        torch.save(backbone, args.out)
    elif args.format == 'onnx':
        print(to_onnx(backbone, args.config, ckpt, args.out, args.size or 224))
    else:
        with open(args.out, 'wb') as f:
            pickle.dump(
                dict(
                    model=to_detectron2(backbone),
                    __author__='mocoplug',
                    matching_heuristics=True), f)
    print(f'wrote {args.out} ({args.format})')
    return backbone


if __name__ == '__main__':
    main()
