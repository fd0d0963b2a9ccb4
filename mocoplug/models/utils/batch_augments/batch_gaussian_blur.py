# Copyright (c) mocoplug contributors. All rights reserved.
"""Per-sample Gaussian blur, bit-identical to OpenCV's uint8 fixed point as
:class:`~mocoplug.datasets.transforms.FastGaussianBlur` calls it."""
import math
from typing import Dict, Tuple

import torch
from torch import Tensor


def fixed_point_kernels(sigma: Tensor, max_radius: int) -> Tensor:
    """OpenCV's uint8 kernels for ``B`` sigmas (0: identity), int32
    ``B x (2 max_radius + 1)`` summing to 256."""
    sigma = sigma.to(torch.float64)
    identity = sigma <= 0
    sigma = torch.where(identity, torch.ones_like(sigma), sigma)
    radius = torch.where(identity, torch.zeros_like(sigma),
                         torch.ceil(3 * sigma))
    distance = torch.arange(
        max_radius, 0, -1, dtype=torch.float64, device=sigma.device)
    scale = -0.125 / (sigma * sigma)
    x = 2 * distance  # OpenCV's x = 2 i - (n - 1)
    taps = torch.exp((x * x).view(1, -1) * scale.view(-1, 1))
    taps = torch.where(
        distance.view(1, -1) <= radius.view(-1, 1), taps,
        torch.zeros_like(taps))
    total = torch.zeros_like(sigma)
    for i in range(max_radius):  # (zeros first: adding 0. changes nothing)
        total = total + taps[:, i]
    weights = taps * (1 / (total * 2 + 1)).view(-1, 1)
    error, quantised = torch.zeros_like(sigma), []
    for i in range(max_radius):
        adjusted = weights[:, i] * 256 + error
        rounded = torch.round(adjusted)  # half to even, as cvRound
        error = adjusted - rounded
        quantised.append(rounded)
    side = torch.stack(quantised, dim=1) if quantised else weights
    side = side.to(torch.int32)
    centre = 256 - 2 * side.sum(dim=1, keepdim=True, dtype=torch.int32)
    return torch.cat([side, centre, side.flip(1)], dim=1)


def _reflect_101(size: int, radius: int, device) -> Tensor:
    """Source index of each padded position (BORDER_REFLECT_101)."""
    if radius >= size:
        raise ValueError(
            f'BatchGaussianBlur: the radius {radius} (ceil(3 * max sigma)) is '
            f'not < the image side {size} px: lower the max of sigma_range to '
            f'<= {(size - 1) / 3:g} or blur larger images')
    index = torch.arange(-radius, size + radius, device=device).abs()
    return torch.where(index >= size, 2 * (size - 1) - index, index)


def fixed_point_blur(images: Tensor, kernels: Tensor) -> Tensor:
    """Separable blur of uint8-valued float32 images by per-sample kernels
    ``B x (2 r + 1)``, as OpenCV's fixed point (exact sums, rounded once)."""
    radius = kernels.shape[1] // 2
    height, width = images.shape[-2:]
    weights = kernels.to(torch.float32).view(kernels.shape[0], 1, 1, 1, -1)
    out = images.to(torch.float32)
    for dim, size in ((3, width), (2, height)):  # rows, then columns
        padded = out.index_select(dim, _reflect_101(size, radius,
                                                    images.device))
        out = padded.narrow(dim, 0, size) * weights[..., 0]
        for j in range(1, 2 * radius + 1):
            out.addcmul_(padded.narrow(dim, j, size), weights[..., j])
    return out.add_(1 << 15).mul_(1 / 65536).floor_().clamp_(max=255)


class BatchGaussianBlur:
    """mmpretrain's ``GaussianBlur`` on a batch: with probability ``prob``,
    sigma uniform in ``sigma_range`` (``0 < min <= max``)."""

    def __init__(self, sigma_range: Tuple[float, float], prob: float) -> None:
        low, high = (float(s) for s in sigma_range)
        if not 0 < low <= high:
            raise ValueError('BatchGaussianBlur: sigma_range must satisfy '
                             f'0 < min <= max, got {sigma_range}')
        self.sigma_range, self.prob = (low, high), float(prob)
        self.max_radius = math.ceil(3 * high)  # FastGaussianBlur's

    def sample(self, num: int, generator: torch.Generator,
               device: torch.device) -> Dict[str, Tensor]:
        """Draw ``apply`` (bool) and ``sigma`` (float64) per sample."""
        kw = dict(generator=generator, device=device, dtype=torch.float64)
        low, high = self.sigma_range
        return dict(
            apply=torch.rand(num, **kw) < self.prob,
            sigma=low + (high - low) * torch.rand(num, **kw))

    def __call__(self, images: Tensor, params: Dict[str, Tensor]) -> Tensor:
        sigma = torch.where(params['apply'], params['sigma'],
                            torch.zeros_like(params['sigma']))
        return fixed_point_blur(images,
                                fixed_point_kernels(sigma, self.max_radius))
