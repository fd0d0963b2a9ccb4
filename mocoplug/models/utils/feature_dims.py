# Copyright (c) mocoplug contributors. All rights reserved.
"""Check at construction that a MoCo model's modules fit together."""
from contextlib import contextmanager
from typing import Optional

import torch
import torch.nn as nn
from mmengine.logging import print_log

PROBE_SIZES = (32, 224)


@contextmanager
def _eval_mode(*modules: Optional[nn.Module]):
    """Eval mode, each submodule's ``training`` flag restored after."""
    modules = [m for m in modules if m is not None]
    flags = [(m, m.training) for mod in modules for m in mod.modules()]
    for mod in modules:
        mod.eval()
    try:
        yield
    finally:
        for m, flag in flags:
            m.training = flag


@torch.no_grad()
def check_feature_dims(algorithm: str,
                       backbone: nn.Module,
                       neck: nn.Module,
                       queue: Optional[nn.Module] = None,
                       predictor: Optional[nn.Module] = None) -> None:
    """Check with a zero image in eval mode that backbone -> neck ->
    predictor fit and ``queue.dim`` is the neck's (ValueError naming the
    field to set); logged and skipped if the backbone refuses the probe."""
    with _eval_mode(backbone, neck, predictor):
        feats, error = None, None
        channels = next((m.in_channels for m in backbone.modules()
                         if isinstance(m, nn.Conv2d) and m.in_channels),
                        3)  # the stem's (a lazy one: 3)
        for size in PROBE_SIZES:
            try:
                feats = backbone(torch.zeros(1, channels, size, size))
                break
            except Exception as e:  # the probe is not this backbone's input
                error = e
        if feats is None:
            print_log(
                f'{algorithm}: the neck/queue dimensions were not checked at '
                f'construction: the backbone ({type(backbone).__name__}) did '
                f'not run on a zero 1x{channels}x32x32 or 224x224 image '
                f'({type(error).__name__}: {error}); a mismatch will show at '
                'the first training step.',
                logger='current')
            return
        feats = tuple(feats) if isinstance(feats, (tuple, list)) else (feats, )
        try:
            key = neck(feats)[0]
        except Exception as e:
            shapes = ', '.join(str(tuple(f.shape[1:])) for f in feats)
            raise ValueError(
                f'{algorithm}: model.neck ({type(neck).__name__}) cannot '
                f'take the output of model.backbone '
                f'({type(backbone).__name__}), feature maps of shape(s) '
                f'{shapes} (channels first, batch left out): set '
                f'model.neck.in_channels={feats[-1].shape[1]} (the channels '
                'of the last feature map; a MoCo neck takes one: e.g. '
                'out_indices=(3, ) for ResNet). '
                f'[{type(e).__name__}: {e}]') from e
        dim = key.shape[-1]
        if predictor is not None:
            try:
                query = predictor((key, ))[0]
            except Exception as e:
                raise ValueError(
                    f'{algorithm}: model.predictor '
                    f'({type(predictor).__name__}) cannot take the '
                    f'{dim}-d output of model.neck: set '
                    f'model.predictor.in_channels={dim} (the neck\'s '
                    f'out_channels). [{type(e).__name__}: {e}]') from e
            if query.shape[-1] != dim:
                raise ValueError(
                    f'{algorithm}: model.predictor outputs '
                    f'{query.shape[-1]}-d queries but the momentum branch '
                    f'(backbone + neck) outputs {dim}-d keys, and each query '
                    'is compared with a key: set '
                    f'model.predictor.out_channels={dim} (the neck\'s '
                    'out_channels).')
    queue_dim = getattr(queue, 'dim', None)
    if queue is not None and queue_dim is not None and queue_dim != dim:
        raise ValueError(
            f'{algorithm}: model.queue.dim={queue_dim} but model.neck outputs '
            f'{dim}-d keys (its out_channels): set model.queue.dim={dim}, or '
            f'model.neck.out_channels={queue_dim}.')
