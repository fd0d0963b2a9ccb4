# Copyright (c) mocoplug contributors. All rights reserved.
from mmdet.models.backbones import ResNet
from mmdet.models.layers import ResLayer
from mmdet.models.roi_heads.shared_heads.res_layer import \
    ResLayer as SharedResLayer
from mmdet.registry import MODELS
from mmpretrain.models.utils import build_norm_layer


@MODELS.register_module()
class ScalableResLayerExtraNorm(SharedResLayer):
    """mmpretrain's ``ResLayerExtraNorm`` (C4 res5 head and a norm) at the
    backbone's ``base_channels``, so a slim backbone keeps its res5.

    Args:
        depth (int): Depth of the ResNet whose stage this is.
        base_channels (int): Width of the ResNet's first stage.
        **kwargs: The other arguments of mmdet's shared ``ResLayer``.
    """

    def __init__(self, depth: int, base_channels: int = 64, **kwargs) -> None:
        super().__init__(depth, **kwargs)
        block, stage_blocks = ResNet.arch_settings[depth]
        planes = base_channels * 2**self.stage
        if base_channels != 64:
            self.add_module(
                f'layer{self.stage + 1}',
                ResLayer(
                    block,
                    planes // 2 * block.expansion,
                    planes,
                    stage_blocks[self.stage],
                    stride=kwargs.get('stride', 2),
                    dilation=kwargs.get('dilation', 1),
                    style=kwargs.get('style', 'pytorch'),
                    with_cp=kwargs.get('with_cp', False),
                    norm_cfg=self.norm_cfg,
                    dcn=kwargs.get('dcn')))
        self.norm = build_norm_layer(self.norm_cfg, planes * block.expansion)

    def forward(self, x):
        return self.norm(getattr(self, f'layer{self.stage + 1}')(x))
