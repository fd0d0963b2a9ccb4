# Copyright (c) mocoplug contributors. All rights reserved.
"""Start a MoCo run's encoders from released weights (continued pretraining,
Reed et al., WACV 2022), the checkpoint's layout found from its keys."""
from collections import Counter
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.runner.checkpoint import _load_checkpoint

# name, backbone prefix, projection prefixes, non-backbone keys (e.g. fc)
LAYOUTS: List[Tuple[str, str, Tuple[str, ...], Tuple[str, ...]]] = [
    ('mocoplug / mmpretrain / mmselfsup', 'backbone.', ('neck.', ), ()),
    ('official MoCo v1/v2', 'module.encoder_q.', ('module.encoder_q.fc.', ),
     ('fc.', )),
    ('official MoCo v3', 'module.base_encoder.',
     ('module.base_encoder.fc.', 'module.base_encoder.head.'), ('fc.',
                                                                'head.')),
    ('a bare backbone (torchvision, extract_backbone.py)', '', (), ('fc.',
                                                                    'head.')),
]


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
    """The tensors under ``prefix``, less those under ``prefix + skip``,
    with the prefix removed."""
    n = len(prefix)
    return {
        k[n:]: v
        for k, v in state.items()
        if k.startswith(prefix) and not k[n:].startswith(skip)
    }


def load_encoder_checkpoint(path: str, backbone: nn.Module,
                            neck: Optional[nn.Module]) -> Dict[str, str]:
    """Load the query encoder of ``path`` into ``backbone`` (exactly, else
    ValueError) and into ``neck`` when the shapes agree. Returns ``layout``
    and ``neck`` ('loaded' or why it stayed fresh)."""
    ckpt = _load_checkpoint(path, map_location='cpu')
    state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not state:
        raise ValueError(f'encoders_from={path!r} holds no state dict')
    target = backbone.state_dict()
    # BN batch counters are not weights; older checkpoints lack them
    required = [k for k in target if not k.endswith('num_batches_tracked')]
    tried = []
    for name, prefix, heads, skip in LAYOUTS:
        source = _under(state, prefix, skip)
        loaded = {
            k: v
            for k, v in source.items()
            if k in target and v.shape == target[k].shape
        }
        extra = [k for k in source if k not in loaded]  # or other shape
        if all(k in loaded for k in required) and not extra:
            break
        tried.append(f'{name} ({prefix or "no prefix"}): '
                     f'{sum(k in loaded for k in required)}/{len(required)}' +
                     (f', {len(extra)} that do not fit' if extra else ''))
    else:
        raise ValueError(
            f'encoders_from={path!r}: no known key layout gives all '
            f'{len(required)} tensors of the backbone '
            f'({type(backbone).__name__}); tensors found per layout: '
            f'{"; ".join(tried)}. The checkpoint\'s keys start with '
            f'{prefixes(list(state))}.')
    backbone.load_state_dict(loaded, strict=False)
    report = dict(layout=name, neck='fresh: the checkpoint has no projection')
    if neck is not None:
        want = neck.state_dict()
        for head in heads:
            have = _under(state, head)
            if not have:
                continue
            if head == 'neck.' and have.keys() == want.keys() and all(
                    have[k].shape == want[k].shape for k in want):
                neck.load_state_dict(have)
                report['neck'] = 'loaded'
            elif head != 'neck.' and [v.shape for v in have.values()] == [
                    v.shape for v in want.values()
            ]:  # the official MLP: the same tensors, other names
                neck.load_state_dict(dict(zip(want, have.values())))
                report['neck'] = 'loaded'
            else:
                report['neck'] = (f'fresh: the checkpoint\'s projection '
                                  f'({head}*, {len(have)} tensors) does not '
                                  'fit the neck')
            break
    print_log(
        f'encoders_from: both encoders start from {path} ({name} layout, '
        f'{len(required)} backbone tensors); projection neck '
        f'{report["neck"]}',
        logger='current')
    return report
