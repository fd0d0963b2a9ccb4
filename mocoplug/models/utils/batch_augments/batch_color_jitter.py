# Copyright (c) mocoplug contributors. All rights reserved.
"""Per-sample colour jitter of a float32 BGR batch (uint8 values), as the
per-image :class:`~mocoplug.datasets.transforms.FastColorJitter`."""
from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)  # mmpretrain's indices
NO_OP = -1
FACTOR_NAMES = ('brightness', 'contrast', 'saturation', 'hue')
_EPS = float(np.finfo(np.float32).eps)  # OpenCV's FLT_EPSILON


def pil_luma(images: Tensor) -> Tensor:
    """PIL's ``convert('L')`` of a BGR batch, int32 ``B x 1 x H x W``."""
    b, g, r = images.to(torch.int32).unbind(1)
    return ((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16).unsqueeze(1)


def pil_rounded_mean(luma: Tensor) -> Tensor:
    """PIL's ``int(mean + 0.5)`` of each sample's grey levels, in integers."""
    n = luma[0].numel()
    return (2 * luma.sum(dim=(1, 2, 3), dtype=torch.int64) + n) // (2 * n)


def pil_blend(degenerate: Tensor, images: Tensor, factor: Tensor) -> Tensor:
    """PIL's ``Image.blend(degenerate, images, factor)``, per sample factor
    (``B``), in float32; factor 1 returns ``images`` exactly."""
    factor = factor.to(torch.float32).view(-1, 1, 1, 1)
    degenerate = degenerate.to(torch.float32)
    out = degenerate + factor * (images - degenerate)
    return out.clamp_(0, 255).floor_()


def enhance(images: Tensor, op: Tensor, factor: Tensor) -> Tensor:
    """Per sample, the op (``B`` ints: BRIGHTNESS, CONTRAST, SATURATION or
    NO_OP) with its ``factor`` (``B``)."""
    luma = pil_luma(images)
    mean = pil_rounded_mean(luma).view(-1, 1, 1, 1)
    op = op.view(-1, 1, 1, 1)
    degenerate = torch.where(op == BRIGHTNESS, torch.zeros_like(luma),
                             torch.where(op == CONTRAST, mean, luma))
    factor = torch.where(op.view(-1) == NO_OP, torch.ones_like(factor), factor)
    return pil_blend(degenerate, images, factor)


def rotate_hue(images: Tensor, hue_factor: Tensor) -> Tensor:
    """Rotate the hue by ``hue_factor`` (``B``, in turns) in float HSV."""
    b, g, r = (images * np.float32(1 / 255)).unbind(1)
    value = torch.maximum(torch.maximum(r, g), b)
    diff = value - torch.minimum(torch.minimum(r, g), b)
    saturation = diff / (value.abs() + _EPS)
    scale = 60 / (diff + _EPS)
    hue = torch.where(
        value == r, (g - b) * scale,
        torch.where(value == g, (b - r) * scale + 120, (r - g) * scale + 240))
    hue = torch.where(hue < 0, hue + 360, hue)
    shift = torch.remainder(hue_factor.to(torch.float64) * 360, 360)
    hue = hue + shift.to(torch.float32).view(-1, 1, 1)
    hue = torch.where(hue >= 360, hue - 360, hue) / 60
    channels = []
    for n in (1, 3, 5):
        k = torch.remainder(hue + n, 6)
        ramp = torch.minimum(k, 4 - k).clamp_(0, 1)
        channels.append(value - value * saturation * ramp)
    return (torch.stack(channels, dim=1) * 255).abs_().round_().clamp_(0, 255)


class BatchColorJitter:
    """mmpretrain's ``RandomApply([ColorJitter])`` on a batch: per sample,
    with probability ``prob``, uniform factors applied in a random order.

    Args:
        brightness, contrast, saturation (tuple, optional): ``(min, max)``
            factor ranges; None disables the operation.
        hue (tuple, optional): ``(min, max)`` hue factor range in turns.
        prob (float): Probability of jittering a sample.
    """

    def __init__(self,
                 brightness: Optional[Tuple[float, float]] = None,
                 contrast: Optional[Tuple[float, float]] = None,
                 saturation: Optional[Tuple[float, float]] = None,
                 hue: Optional[Tuple[float, float]] = None,
                 prob: float = 1.) -> None:
        self.ranges = dict(enumerate((brightness, contrast, saturation, hue)))
        self.prob = float(prob)
        self.blends = [op for op in range(HUE) if self.ranges[op] is not None]

    def sample(self, num: int, generator: torch.Generator,
               device: torch.device) -> Dict[str, Tensor]:
        """Draw ``apply`` (bool), ``order`` (a permutation of the four
        operations) and one factor per enabled operation, per sample."""
        kw = dict(generator=generator, device=device, dtype=torch.float64)
        params = dict(
            apply=torch.rand(num, **kw) < self.prob,
            order=torch.rand((num, 4), **kw).argsort(dim=1))
        for op, name in enumerate(FACTOR_NAMES):
            if self.ranges[op] is not None:
                low, high = self.ranges[op]
                params[name] = low + (high - low) * torch.rand(num, **kw)
        return params

    def __call__(self, images: Tensor, params: Dict[str, Tensor]) -> Tensor:
        if not self.blends and self.ranges[HUE] is None:
            return images
        apply = params['apply']
        position = params['order'].argsort(dim=1)  # position of each op
        factors = torch.ones(
            apply.shape[0], 3, dtype=torch.float64, device=apply.device)
        for op, name in enumerate(FACTOR_NAMES[:3]):
            if name in params:
                factors[:, op] = params[name]
        blends = torch.cat([
            torch.full((1, ), op, dtype=torch.long, device=apply.device)
            for op in self.blends
        ])
        blend_position = position.index_select(1, blends)
        in_order = blend_position.argsort(dim=1)
        sequence = blends[in_order]  # the sample's blends, in its order
        seq_position = blend_position.gather(1, in_order)

        def run_blends(images, active):
            for slot in range(len(self.blends)):
                op = torch.where(active[:, slot], sequence[:, slot], NO_OP)
                factor = factors.gather(1, op.clamp(min=0).view(-1, 1))
                images = enhance(images, op, factor.view(-1))
            return images

        active = apply.view(-1, 1)
        if self.ranges[HUE] is None:
            return run_blends(images, active.expand_as(sequence))
        hue_position = position[:, HUE:HUE + 1]
        images = run_blends(images, active & (seq_position < hue_position))
        rotated = rotate_hue(images, params['hue'])
        images = torch.where(apply.view(-1, 1, 1, 1), rotated, images)
        return run_blends(images, active & (seq_position > hue_position))
