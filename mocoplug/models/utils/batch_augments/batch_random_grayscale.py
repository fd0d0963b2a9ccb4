# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, Sequence

import torch


class BatchRandomGrayscale:
    """mmcv's ``RandomGrayscale`` (``keep_channels=True``) on float32 ``B x 3 x
    H x W`` uint8 values, bit-identical to it and to
    :class:`~mocoplug.datasets.transforms.FastRandomGrayscale`.

    Args:
        prob (float): Probability of turning a sample grey.
        channel_weights (Sequence[float]): One weight per channel.
    """

    def __init__(self, prob: float, channel_weights: Sequence[float]) -> None:
        if len(channel_weights) != 3:
            raise ValueError('BatchRandomGrayscale: 3 channel_weights '
                             f'needed, got {channel_weights}')
        self.prob = float(prob)
        total = sum(channel_weights)  # as mmcv: Python sum, then divide
        self.weights = [float(w) / total for w in channel_weights]

    def sample(self, num: int, generator: torch.Generator,
               device: torch.device) -> Dict[str, torch.Tensor]:
        """Draw ``apply`` (bool) per sample."""
        draw = torch.rand(
            num, generator=generator, device=device, dtype=torch.float64)
        return dict(apply=draw < self.prob)

    def __call__(self, images: torch.Tensor,
                 params: Dict[str, torch.Tensor]) -> torch.Tensor:
        x = images.to(torch.float64)
        grey = self.weights[0] * x[:, 0]
        grey = grey + self.weights[1] * x[:, 1]
        grey = grey + self.weights[2] * x[:, 2]
        grey = grey.floor_().to(images.dtype).unsqueeze(1).expand_as(images)
        return torch.where(params['apply'].view(-1, 1, 1, 1), grey, images)
