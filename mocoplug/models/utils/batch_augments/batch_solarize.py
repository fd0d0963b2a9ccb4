# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict

import torch

from .batch_random_grayscale import BatchRandomGrayscale


class BatchSolarize:
    """mmpretrain's ``Solarize`` with a fixed threshold on a batch: with
    probability ``prob``, every value ``>= thr`` becomes ``255 - value``
    (``mmcv.solarize``), exactly.

    Args:
        thr (float): Threshold.
        prob (float): Probability of solarizing a sample.
    """

    def __init__(self, thr: float, prob: float) -> None:
        self.thr, self.prob = float(thr), float(prob)

    sample = BatchRandomGrayscale.sample  # ``apply`` (bool) per sample

    def __call__(self, images: torch.Tensor,
                 params: Dict[str, torch.Tensor]) -> torch.Tensor:
        flip = params['apply'].view(-1, 1, 1, 1) & (images >= self.thr)
        return torch.where(flip, 255 - images, images)
