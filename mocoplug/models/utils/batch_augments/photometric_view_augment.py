# Copyright (c) mocoplug contributors. All rights reserved.
"""The photometric steps of one view pipeline, as batched operations."""
import copy
from typing import Dict, List, Sequence, Tuple

import torch
from mmengine.registry import DefaultScope

from mocoplug.datasets.transforms.view_pipeline_split import (
    split_view_pipeline, transform_name)
from mocoplug.registry import TRANSFORMS
from .batch_color_jitter import BatchColorJitter
from .batch_gaussian_blur import BatchGaussianBlur
from .batch_random_grayscale import BatchRandomGrayscale
from .batch_solarize import BatchSolarize


def _magnitude_range(transform, name: str) -> Tuple[float, float]:
    """The range of a ``BaseAugTransform`` magnitude (std 'inf' or <= 0)."""
    v1, v2 = transform.magnitude_range
    top = v1 + transform.magnitude_level / transform.total_level * (v2 - v1)
    if transform.magnitude_std == 'inf':
        return (v1, top)
    if transform.magnitude_std <= 0:
        return (top, top)
    raise ValueError(f"{name}: magnitude_std 'inf' or 0 on the device, got "
                     f'{transform.magnitude_std}')


def _color_jitter(jitter, prob: float, name: str) -> BatchColorJitter:
    if getattr(jitter, 'backend', 'pillow') != 'pillow':
        raise ValueError(f"{name}: backend 'pillow' on the device, got "
                         f'{jitter.backend!r}')
    if getattr(jitter, 'hue_backend', 'float') != 'float':
        raise ValueError(f"{name}: hue_backend 'float' on the device")
    return BatchColorJitter(jitter.brightness, jitter.contrast,
                            jitter.saturation, jitter.hue, prob)


def build_batch_op(cfg: dict):
    """The batched operation of a photometric transform config."""
    name = transform_name(cfg)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        transform = TRANSFORMS.build(copy.deepcopy(dict(cfg)))
    if name == 'RandomApply':
        return _color_jitter(transform.transforms.transforms[0],
                             transform.prob, name)
    if name in ('ColorJitter', 'FastColorJitter'):
        return _color_jitter(transform, 1., name)
    if name in ('RandomGrayscale', 'FastRandomGrayscale'):
        if not transform.keep_channels or transform.color_format == 'hsv':
            raise ValueError(f'{name}: keep_channels=True and a BGR/RGB '
                             'color_format on the device')
        return BatchRandomGrayscale(transform.prob, transform.channel_weights)
    if name in ('GaussianBlur', 'FastGaussianBlur'):
        r = transform.radius
        sigma = (r, r) if r is not None else _magnitude_range(transform, name)
        return BatchGaussianBlur(sigma, transform.prob)
    if name == 'Solarize':
        if transform.thr is None:
            raise ValueError(f'{name}: the device path needs a fixed thr')
        return BatchSolarize(transform.thr, transform.prob)
    raise ValueError(f'{name}: no batched operation for this transform')


class PhotometricViewAugment:
    """A ``MultiView`` pipeline's photometric steps on a batch, per sample."""

    def __init__(self, pipeline: Sequence[dict]) -> None:
        self.geometric, device = split_view_pipeline(pipeline)
        self.ops = [build_batch_op(cfg) for cfg in device]

    def sample(self, num: int, generator: torch.Generator,
               device: torch.device) -> List[Dict[str, torch.Tensor]]:
        """Each step's parameters for ``num`` samples, drawn in order."""
        return [op.sample(num, generator, device) for op in self.ops]

    def __call__(self, views: torch.Tensor,
                 params: List[Dict[str, torch.Tensor]]) -> torch.Tensor:
        """Augment uint8-valued ``B x 3 x H x W`` views; returns float32."""
        images = views.to(torch.float32)
        for op, op_params in zip(self.ops, params):
            images = op(images, op_params)
        return images

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}('
                f'{[type(op).__name__ for op in self.ops]})')
