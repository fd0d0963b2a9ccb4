# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict

import torch


class BatchSolarize:
    """mmpretrain's ``Solarize`` with a fixed threshold on a batch: with
    probability ``prob``, every value ``>= thr`` becomes ``255 - value``
    (``mmcv.solarize``), exactly.

    Args:
        thr (float): Threshold.
        prob (float): Probability of solarizing a sample.
    """

    def __init__(self, thr: float, prob: float) -> None:
        self.thr = float(thr)
        self.prob = float(prob)

    def sample(self, num: int, generator: torch.Generator,
               device: torch.device) -> Dict[str, torch.Tensor]:
        """Draw ``apply`` (bool) per sample."""
        draw = torch.rand(
            num, generator=generator, device=device, dtype=torch.float64)
        return dict(apply=draw < self.prob)

    def __call__(self, images: torch.Tensor,
                 params: Dict[str, torch.Tensor]) -> torch.Tensor:
        flip = params['apply'].view(-1, 1, 1, 1) & (images >= self.thr)
        return torch.where(flip, 255 - images, images)
