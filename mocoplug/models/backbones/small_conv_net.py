# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule

from mocoplug.registry import MODELS


@MODELS.register_module()
class SmallConvNet(BaseModule):
    """A plain stack of 3x3 conv-BN-ReLU layers with 2x2 max-pooling, for
    tiny images such as the demo's (docs/design_notes.md#the-demos-backbone).

    Args:
        in_channels (int): Input channels. Defaults to 3.
        channels (Sequence[int]): Output channels of each conv layer.
        pool_after (Sequence[int]): Layers followed by a 2x2 max-pool.
            Defaults to ``(0, 1, 2)`` (32 px -> 4 px).
        norm_cfg (dict): Norm layer config. Defaults to ``dict(type='BN')``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int = 3,
                 channels: Sequence[int] = (32, 64, 128, 256),
                 pool_after: Sequence[int] = (0, 1, 2),
                 norm_cfg: dict = dict(type='BN'),
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg)
        bad = [i for i in pool_after if not 0 <= i < len(channels)]
        if not channels or bad:
            raise ValueError(
                f'SmallConvNet: pool_after {tuple(pool_after)} must index '
                f'the {len(channels)} layers of channels {tuple(channels)}')
        layers = []
        for i, out in enumerate(channels):
            layers += [
                nn.Conv2d(in_channels, out, 3, padding=1, bias=False),
                build_norm_layer(norm_cfg, out)[1],
                nn.ReLU(inplace=True)
            ]
            if i in pool_after:
                layers.append(nn.MaxPool2d(2))
            in_channels = out
        self.layers, self.out_channels = nn.Sequential(*layers), channels[-1]

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor]:
        """The last feature map, in a tuple as mmpretrain's backbones."""
        return (self.layers(x), )
