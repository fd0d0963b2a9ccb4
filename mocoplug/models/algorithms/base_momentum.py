# Copyright (c) mocoplug contributors. All rights reserved.
import copy
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.models.selfsup import BaseSelfSupervisor

from mocoplug.registry import MODELS
from ..utils import at_least_float32, load_encoder_checkpoint


def build_module(cfg: Union[dict, nn.Module, None]) -> Optional[nn.Module]:
    """Build a config with mocoplug's MODELS; pass modules and None through."""
    if cfg is None or isinstance(cfg, nn.Module):
        return cfg
    return MODELS.build(cfg)


class BaseMomentumSelfSupervisor(BaseSelfSupervisor):
    """Base of MoCo v1/v2/v3: ``momentum_encoder``, a frozen copy of
    ``backbone`` + ``neck`` that ``MomentumUpdateHook`` updates.

    Args:
        backbone, neck, head (dict): The backbone, projection neck and head.
        pretrained (str, optional): Checkpoint of the whole model to load.
        data_preprocessor (dict, optional): Untyped: SelfSupDataPreprocessor.
        init_cfg (dict or list[dict], optional): Initialization config dict.
        channels_last (bool): Channels-last 4-D weights and views.
        encoders_from (str, optional): A checkpoint whose query encoder
            starts both (``load_encoder_checkpoint``).
    """

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 pretrained: Optional[str] = None,
                 data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[Union[List[dict], dict]] = None,
                 channels_last: bool = False,
                 encoders_from: Optional[str] = None) -> None:
        data_preprocessor = dict(data_preprocessor or {})
        data_preprocessor.setdefault('type', 'SelfSupDataPreprocessor')
        super().__init__(
            backbone=build_module(backbone),
            neck=build_module(neck),
            head=build_module(head),
            pretrained=pretrained,
            data_preprocessor=build_module(data_preprocessor),
            init_cfg=init_cfg)
        self.channels_last, self.encoders_from = channels_last, encoders_from
        self._versions_at_start: Optional[Tuple[int, int]] = None
        self._optimizer_stepped = self._key_encoder_seen_moving = False

    def build_momentum_encoder(self) -> None:
        """Create ``self.momentum_encoder`` from the online modules."""
        if self.channels_last:  # kept by the copy, init, loading and .to()
            self.backbone.to(memory_format=torch.channels_last)
        self.momentum_encoder = nn.Sequential(
            OrderedDict(
                backbone=copy.deepcopy(self.backbone),
                neck=copy.deepcopy(self.neck)))
        self.momentum_encoder.requires_grad_(False)

    @torch.no_grad()
    def embed_keys(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised momentum-encoder embeddings, float32 or wider."""
        return F.normalize(
            at_least_float32(self.momentum_encoder(images)[0]), dim=1)

    encode_keys = embed_keys  # the queue's keys (MoCo: under Shuffle BN)

    def momentum_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        """The (online, momentum) module pairs MomentumUpdateHook updates."""
        return [(self.backbone, self.momentum_encoder.backbone),
                (self.neck, self.momentum_encoder.neck)]

    def compile_encoders(self, **options) -> None:
        """``torch.compile(**options)`` the encoders in place (the rest stays
        eager); on the CPU inductor keeps the model's memory format."""
        for module in self.modules():  # numpy scalars break dynamo's graphs
            for key, value in list(vars(module).items()):
                if isinstance(value, np.generic):
                    setattr(module, key, value.item())
        if options.get('backend', 'inductor') == 'inductor' and next(
                self.parameters()).device.type == 'cpu':
            from torch._inductor import list_mode_options  # (47 ms import)
            options['options'] = {
                'layout_optimization': self.channels_last,
                **list_mode_options(options.pop('mode', None) or 'default'),
                **options.get('options', {})
            }
        for name in ('backbone', 'neck', 'predictor', 'momentum_encoder'):
            if getattr(self, name, None) is not None:
                getattr(self, name).compile(**options)

    def init_weights(self) -> None:
        """Initialise (or load ``encoders_from`` into) the online modules and
        copy them into the momentum encoder; a whole-model ``Pretrained``
        init_cfg keeps the checkpoint's momentum encoder."""
        super().init_weights()
        cfgs = self.init_cfg
        cfgs = cfgs if isinstance(cfgs, list) else [cfgs]
        if 'Pretrained' in (c.get('type') for c in cfgs
                            if isinstance(c, dict)):
            return
        if self.encoders_from:
            load_encoder_checkpoint(self.encoders_from,
                                    self.backbone, self.neck,
                                    getattr(self, 'predictor', None))
        for online, momentum in self.momentum_pairs():
            momentum.load_state_dict(online.state_dict())

    def train_step(self, data: Union[dict, tuple, list],
                   optim_wrapper) -> Dict[str, torch.Tensor]:
        """mmengine's step; notes whether the optimizer stepped."""
        log_vars = super().train_step(data, optim_wrapper)
        should_update = getattr(optim_wrapper, 'should_update', None)
        if callable(should_update) and should_update():
            self._optimizer_stepped = True
        return log_vars

    def forward(self,
                inputs: Union[torch.Tensor, List[torch.Tensor]],
                data_samples: Optional[list] = None,
                mode: str = 'tensor'):
        """mmpretrain's; :meth:`check_key_encoder_moves` before a loss."""
        if mode == 'loss' and self.training:
            self.check_key_encoder_moves()
        return super().forward(inputs, data_samples, mode)

    @torch.compiler.disable
    def check_key_encoder_moves(self) -> None:
        """Raise if an optimizer step ran, the momentum encoder never moved."""
        if self._key_encoder_seen_moving:
            return
        versions = tuple(
            sum(p._version for pair in self.momentum_pairs()
                for p in pair[side].parameters()) for side in (0, 1))
        start = self._versions_at_start
        if start is None:
            self._versions_at_start = versions
        elif versions[1] != start[1]:
            self._key_encoder_seen_moving = True
        elif self._optimizer_stepped or versions[0] != start[0]:
            raise RuntimeError(
                f'{type(self).__name__}: nothing updates the momentum '
                "encoder; add custom_hooks=[dict(type='MomentumUpdateHook', "
                "momentum=0.999)] (v1/v2; v3: schedule='cosine', "
                'momentum=0.99), or outside a Runner call '
                'MomentumUpdateHook.attach(model) and its update(m).')

    def views(self, inputs: Union[torch.Tensor, List[torch.Tensor]],
              algorithm: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """The batch's two views (channels-last if set); raises otherwise."""
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            got = (f'{len(inputs)} views' if isinstance(inputs, (list, tuple))
                   else f'a single {type(inputs).__name__}')
            raise ValueError(
                f'{algorithm} needs two views per image but got {got}: '
                "wrap the train pipeline in dict(type='MultiView', "
                'num_views=2, transforms=[...]) before PackInputs.')
        if not self.channels_last:
            return inputs[0], inputs[1]
        return tuple(
            view.contiguous(memory_format=torch.channels_last)
            for view in inputs)
