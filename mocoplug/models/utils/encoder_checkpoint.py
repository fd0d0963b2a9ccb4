# Copyright (c) mocoplug contributors. All rights reserved.
"""Start a MoCo run's encoders from released weights (continued pretraining,
Reed et al., WACV 2022), the checkpoint's layout found from its keys."""
import logging
import re
from collections import Counter
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.runner.checkpoint import _load_checkpoint

# name, backbone prefix, neck prefixes, predictor prefixes, non-backbone keys
Layout = Tuple[str, str, Tuple[str, ...], Tuple[str, ...], Tuple[str, ...]]
LAYOUTS: List[Layout] = [
    ('mocoplug / mmpretrain / mmselfsup', 'backbone.', ('neck.', ),
     ('predictor.', 'head.predictor.'), ()),
    ('official MoCo v1/v2', 'module.encoder_q.', ('module.encoder_q.fc.', ),
     (), ('fc.', )),
    ('official MoCo v3', 'module.base_encoder.', ('module.base_encoder.fc.',
                                                  'module.base_encoder.head.'),
     ('module.predictor.', ), ('fc.', 'head.')),
    ('a bare backbone (torchvision, timm, extract_backbone.py)', '', (), (),
     ('fc.', 'head.')),
    ('a bare backbone saved wrapped (DataParallel)', 'module.', (), (),
     ('fc.', 'head.')),
]
UNREAD = ('module.encoder_k.', 'module.momentum_encoder.', 'momentum_encoder.',
          'encoder_k.', 'encoder_q.', 'module.queue', 'queue')
# timm's ViT and mmpretrain's VisionTransformer prefixes ('#': a block)
VIT_NAMES = [('patch_embed.proj.', 'patch_embed.projection.'),
             ('blocks.#.norm1.', 'layers.#.ln1.'),
             ('blocks.#.norm2.', 'layers.#.ln2.'),
             ('blocks.#.attn.', 'layers.#.attn.'),
             ('blocks.#.mlp.fc1.', 'layers.#.ffn.layers.0.0.'),
             ('blocks.#.mlp.fc2.', 'layers.#.ffn.layers.1.'),
             ('norm.', 'ln1.')]


def variable_size_state(model: nn.Module) -> set:
    """Names of the entries whose size is the device's (a generator's)."""
    return {
        f'{prefix}.{key}' if prefix else key
        for prefix, module in model.named_modules()
        for key in getattr(module, 'variable_size_state', ())
    }


def rename_vit(state: Dict[str, torch.Tensor],
               to_timm: bool = False) -> Dict[str, torch.Tensor]:
    """timm ViT names (official MoCo v3) as mmpretrain's, or back."""
    rules = [(re.compile('^' + re.escape(a).replace(r'\#', r'(\d+)')),
              b.replace('#', r'\1'))
             for a, b in (p[::-1] if to_timm else p for p in VIT_NAMES)]
    out = {}
    for key, value in state.items():
        for pattern, repl in rules:
            key, done = pattern.subn(repl, key)
            if done:
                break
        out[key] = value
    return out


def prefixes(keys: List[str], depth: int = 2, limit: int = 8) -> str:
    """'module.encoder_q.* (320), module.queue (1)' for a list of keys."""
    groups = Counter('.'.join(k.split('.')[:depth]) +
                     ('.*' if k.count('.') >= depth else '') for k in keys)
    parts = [f'{name} ({n})' for name, n in groups.most_common(limit)]
    more = len(groups) - limit
    return ', '.join(parts) + (f', +{more} more' if more > 0 else '')


def _under(state: Dict[str, torch.Tensor],
           prefix: str,
           skip: Tuple[str, ...] = ()) -> Dict[str, torch.Tensor]:
    """The tensors under ``prefix`` (less ``prefix + skip``), unprefixed."""
    n = len(prefix)
    return {
        k[n:]: v
        for k, v in state.items()
        if k.startswith(prefix) and not k[n:].startswith(skip)
    }


def _fit(have: Dict[str, torch.Tensor],
         module: nn.Module) -> Optional[Dict[str, torch.Tensor]]:
    """``have`` under ``module``'s names (its own, else taken in order), or
    None unless every tensor's shape then agrees."""
    want = module.state_dict()
    if have.keys() != want.keys() and len(have) == len(want):
        have = dict(zip(want, have.values()))
    fits = have.keys() == want.keys() and all(v.shape == want[k].shape
                                              for k, v in have.items())
    return have if fits else None


def checkpoint_state(path: str,
                     what: str,
                     map_location: str = 'cpu') -> Dict[str, torch.Tensor]:
    """The model state of the checkpoint at ``path`` (``state_dict`` or the
    whole mapping); ValueError naming ``what`` when it holds none."""
    ckpt = _load_checkpoint(path, map_location=map_location)
    state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not state:
        raise ValueError(f'{what}={path!r} holds no state dict')
    return state


def adapt_stem(weight: torch.Tensor, bands: int) -> torch.Tensor:
    """An RGB stem's weight (out, 3, k, k) for ``bands`` input bands by
    timm's ``adapt_input_conv`` rule: summed over RGB for 1 band; else RGB
    repeated to ``bands`` and scaled by 3 / bands."""
    if bands == 1:
        return weight.sum(dim=1, keepdim=True)
    repeat = -(-bands // weight.shape[1])
    return weight.repeat(1, repeat, 1, 1)[:, :bands] * (3 / bands)


def fit_layout(state: Dict[str, torch.Tensor],
               module: nn.Module,
               what: str,
               prefix: Optional[str] = None,
               keep_init: Tuple[str, ...] = (),
               unread: Tuple[str, ...] = (),
               stems: Optional[list] = None) -> Tuple[Layout, dict]:
    """The first layout (``prefix`` first, then ``LAYOUTS``) under which
    ``state`` gives every tensor of ``module`` (``num_batches_tracked``
    optional) at its shape and nothing else (timm ViT names read as
    mmpretrain's). ``keep_init``: module key prefixes left at init;
    ``unread``: checkpoint key prefixes (layout prefix removed) for other
    modules; ``stems`` (a list): an RGB stem is adapted (:func:`adapt_stem`),
    its name appended. Returns the layout and the tensors to load;
    ValueError naming ``what`` and the layouts tried."""
    variable = variable_size_state(module)

    def own(items):  # less the keys kept at init and the device's
        return {
            k: v
            for k, v in items
            if not k.startswith(keep_init) and k not in variable
        }

    target = own(module.state_dict().items())
    required = [k for k in target if not k.endswith('num_batches_tracked')]
    layouts, tried = [lay for lay in LAYOUTS if lay[1] != prefix], []
    if prefix is not None:
        given = [lay for lay in LAYOUTS if lay[1] == prefix]
        layouts = (given or [(f'init_cfg.prefix={prefix!r}', prefix, (), (),
                              ())]) + layouts
    for layout in layouts:
        name, where, _, _, skip = layout
        skip = tuple(
            s for s in skip if not any(k.startswith(s) for k in target))
        source = _under(state, where, skip + tuple(unread))
        timm = 'patch_embed.proj.weight' in source.keys() - target.keys()
        source = own((rename_vit(source) if timm else source).items())
        stem = next((k for k, v in target.items() if v.dim() == 4), None)
        adapted = stems is not None and stem in source and \
            source[stem].dim() == 4 and source[stem].shape[1] == 3 and \
            target[stem].shape[1] != 3 and \
            source[stem].shape[2:] == target[stem].shape[2:]
        if adapted:
            source[stem] = adapt_stem(source[stem], target[stem].shape[1])
        loaded = {
            k: v
            for k, v in source.items()
            if k in target and v.shape == target[k].shape
        }
        extra = [k for k in source if k not in loaded]  # or other shape
        missing = [k for k in required if k not in loaded]
        if not missing and not extra:
            if adapted:
                stems.append(stem)
            return layout, loaded
        if timm:  # the official ViT: refuse what does not map exactly
            unplaced = [
                f'{k} {tuple(source[k].shape)}' +
                (f' (backbone: {tuple(target[k].shape)})'
                 if k in target else '') for k in extra[:8]
            ]
            raise ValueError(
                f'{what}: the timm ViT under {where or "-"} '
                "(official MoCo v3; names as mmpretrain's) does not map "
                f'exactly onto {type(module).__name__}: no place for '
                f'{unplaced}' + (f', nothing for {prefixes(missing, depth=3)}'
                                 if missing else '') +
                ". Build the backbone as the checkpoint's (arch, img_size, "
                "patch_size; final_norm=True, out_type='cls_token') or "
                'convert the tensors to its names and shapes (e.g. resize '
                'pos_embed) and save them as a bare state dict.')
        tried.append(
            f'{name} ({where or "no prefix"}): '
            f'{len(required) - len(missing)}/{len(required)}' +
            (f', {len(extra)} with no place in it ('
             f'{prefixes(extra, depth=1, limit=5)})' if extra else ''))
    raise ValueError(
        f'{what}: no known key layout gives all {len(required)} tensors of '
        f'{type(module).__name__} (a partial load would leave the rest at '
        f'random init); tensors found per layout: {"; ".join(tried)}. The '
        f"checkpoint's keys start with {prefixes(list(state))}; the "
        f"module's with {prefixes(required, depth=1)}.")


def load_encoder_checkpoint(
        path: str,
        backbone: nn.Module,
        neck: Optional[nn.Module],
        predictor: Optional[nn.Module] = None) -> Dict[str, str]:
    """Load the query encoder of ``path`` into ``backbone`` (exactly, else
    ValueError; timm ViT names as mmpretrain's), its projector into ``neck``
    and predictor into ``predictor`` where all shapes agree. Tensors left
    unread (but the key encoder, queue, classifier) are logged as WARNING.
    Returns ``layout``, ``neck``, ``predictor`` ('loaded' or why fresh)."""
    state, stems = checkpoint_state(path, 'encoders_from'), []
    (name, prefix, heads, preds, skip), loaded = fit_layout(
        state, backbone, f'encoders_from={path!r}', stems=stems)
    required = sum(not k.endswith('num_batches_tracked')
                   for k in backbone.state_dict())
    backbone.load_state_dict(loaded, strict=False)
    read = {prefix + k for k in _under(state, prefix, skip)}
    report = dict(layout=name)
    if stems:
        bands = backbone.state_dict()[stems[-1]].shape[1]
        report['stem'] = (f'{stems[-1]}: RGB weights adapted to {bands} '
                          'bands (timm\'s adapt_input_conv rule)')
    for part, module, where in (('neck', neck, heads), ('predictor', predictor,
                                                        preds)):
        if module is None:
            continue
        head = next((h for h in where if _under(state, h)), '')
        have = _under(state, head) if head else {}
        fit = _fit(have, module) if have else None
        if fit is not None:
            module.load_state_dict(fit)
            read.update(head + k for k in have)
        report[part] = 'loaded' if fit is not None else (
            f"fresh: the checkpoint's {head}* ({len(have)} tensors) does not "
            f'fit' if have else 'fresh: the checkpoint has none')
    left = UNREAD + (() if heads or preds else tuple(prefix + s for s in skip))
    unread = [k for k in state if k not in read and not k.startswith(left)]
    print_log(
        f'encoders_from: both encoders start from {path} ({required} '
        'backbone tensors); ' + '; '.join(f'{k} {v}'
                                          for k, v in report.items()) +
        (f'; NOT LOADED: {prefixes(unread, depth=3)}' if unread else ''),
        logger='current',
        level=logging.WARNING if unread else logging.INFO)
    return report
