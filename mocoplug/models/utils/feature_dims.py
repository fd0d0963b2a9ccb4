# Copyright (c) mocoplug contributors. All rights reserved.
"""Check at construction that the backbone, neck, predictor and queue of a
MoCo model fit together, so that a mismatch in a config is a clear error
before any data is loaded instead of a raw torch shape error at the first
step."""
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.logging import print_log

# Probe image sizes: 32 px costs ResNet-50 about 1/50 of a 224 px forward;
# 224 px is tried only if a backbone refuses 32 px.
PROBE_SIZES = (32, 224)


def _shapes(feats) -> str:
    return ', '.join(str(tuple(f.shape[1:])) for f in feats)


class _EvalMode:
    """Put modules in eval mode (no BN statistics update) and restore each
    submodule's own ``training`` flag afterwards."""

    def __init__(self, *modules: nn.Module) -> None:
        self.modules = [m for m in modules if m is not None]

    def __enter__(self) -> None:
        self.flags: List[Tuple[nn.Module, bool]] = [(m, m.training)
                                                    for mod in self.modules
                                                    for m in mod.modules()]
        for mod in self.modules:
            mod.eval()

    def __exit__(self, *exc) -> None:
        for m, flag in self.flags:
            m.training = flag


@torch.no_grad()
def check_feature_dims(algorithm: str,
                       backbone: nn.Module,
                       neck: nn.Module,
                       queue: Optional[nn.Module] = None,
                       predictor: Optional[nn.Module] = None) -> None:
    """Check that each module of the query/key path takes what the previous
    one outputs, and that the queue stores keys of the neck's dimension.

    One forward pass of a zero image (1 x C x 32 x 32, C from the
    backbone's ``in_channels``, default 3) through the backbone, the neck
    and the predictor, in eval mode and without gradients: it changes no
    parameter, buffer, BN statistic or random stream, and costs a few
    milliseconds on CPU for ResNet-50 or ViT-B (a ViT interpolates its
    position embedding to the small input).

    Checked, with an error naming the field and the value to set:

    - the backbone's output vs ``model.neck.in_channels``;
    - the neck's output vs ``model.predictor``'s input and output (MoCo v3:
      the predicted query is compared with the momentum branch's key, so
      both must have the neck's dimension);
    - the neck's output vs ``model.queue.dim``.

    Not determinable, and then skipped with an INFO log line (the first
    training step reports a mismatch): a backbone that fails on a zero
    image of 32 and 224 px (e.g. a fixed other input size or a non-image
    input); a queue without a ``dim`` attribute (checked by its own
    ``enqueue``).

    Args:
        algorithm (str): Name used in the messages, e.g. ``'MoCo'``.
        backbone (nn.Module): The (query) backbone.
        neck (nn.Module): The projection neck.
        queue (nn.Module, optional): The negative-key queue.
        predictor (nn.Module, optional): MoCo v3's predictor.

    Raises:
        ValueError: On a mismatch.
    """
    with _EvalMode(backbone, neck, predictor):
        feats, error = None, None
        channels = getattr(backbone, 'in_channels', 3)
        channels = channels if isinstance(channels, int) else 3
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
            raise ValueError(
                f'{algorithm}: model.neck ({type(neck).__name__}) cannot '
                f'take the output of model.backbone '
                f'({type(backbone).__name__}), feature maps of shape(s) '
                f'{_shapes(feats)} (channels first, batch left out): set '
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
