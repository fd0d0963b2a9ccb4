# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule

from mocoplug.registry import MODELS


@MODELS.register_module()
class MoCoProjectionNeck(BaseModule):
    """The projection MLP of MoCo v1 (`Momentum Contrast for Unsupervised
    Visual Representation Learning <https://arxiv.org/abs/1911.05722>`_,
    ``num_layers=1``), v2 (`Improved Baselines with Momentum Contrastive
    Learning <https://arxiv.org/abs/2003.04297>`_, 2 layers named as
    mmpretrain's ``MoCoV2Neck``) and v3 (`An Empirical Study of Training
    Self-Supervised Vision Transformers <https://arxiv.org/abs/2104.02057>`_,
    no bias, with BN and a last non-affine BN).

    Args:
        in_channels, hid_channels, out_channels (int): Channels.
        num_layers (int): Number of Linear layers.
        with_bias (bool): Linear layers with a bias.
        with_bn (bool): A norm (then a ReLU) after each hidden Linear.
        with_last_bn (bool): A norm after the last Linear.
        with_last_bn_affine (bool): The last norm learns an affine.
        norm_cfg (dict): Config of the norms.
        with_avg_pool (bool): Average-pool the input map (False for ViT).
        init_cfg (dict or list[dict], optional): Initialization config dict.
    """

    def __init__(self,
                 in_channels: int,
                 hid_channels: int,
                 out_channels: int,
                 num_layers: int = 2,
                 with_bias: bool = True,
                 with_bn: bool = False,
                 with_last_bn: bool = False,
                 with_last_bn_affine: bool = True,
                 norm_cfg: dict = dict(type='BN1d'),
                 with_avg_pool: bool = True,
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if num_layers < 1:
            raise ValueError('MoCoProjectionNeck: `num_layers` must be >= 1, '
                             f'got {num_layers}')
        self.with_avg_pool = with_avg_pool
        if with_avg_pool:
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        layers: List[nn.Module] = []
        for i in range(num_layers):
            dim_in = in_channels if i == 0 else hid_channels
            last = i == num_layers - 1
            dim_out = out_channels if last else hid_channels
            layers.append(nn.Linear(dim_in, dim_out, bias=with_bias))
            if not last:
                if with_bn:
                    layers.append(build_norm_layer(norm_cfg, dim_out)[1])
                layers.append(nn.ReLU(inplace=True))
            elif with_last_bn:
                last_cfg = dict(norm_cfg, affine=with_last_bn_affine)
                layers.append(build_norm_layer(last_cfg, dim_out)[1])
        self.mlp = nn.Sequential(*layers)

    def forward(self, x: Tuple[torch.Tensor]) -> Tuple[torch.Tensor]:
        """Project the backbone's one feature; returns ``((N, out), )``."""
        if len(x) != 1:
            raise ValueError(f'MoCoProjectionNeck: {len(x)} feature maps; set '
                             'the backbone out_indices to its last stage')
        feat = x[0]
        if self.with_avg_pool:
            feat = self.avgpool(feat)
        return (self.mlp(feat.flatten(1)), )
