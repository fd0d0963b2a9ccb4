# Copyright (c) mocoplug contributors. All rights reserved.
import copy
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
from mmpretrain.models.selfsup import BaseSelfSupervisor

from mocoplug.registry import MODELS
from ..utils import load_encoder_checkpoint


def build_module(cfg: Union[dict, nn.Module, None]) -> Optional[nn.Module]:
    """Build a config with mocoplug's MODELS; pass modules and None through."""
    if cfg is None or isinstance(cfg, nn.Module):
        return cfg
    return MODELS.build(cfg)


class BaseMomentumSelfSupervisor(BaseSelfSupervisor):
    """Base of the algorithms with a momentum (key) encoder: MoCo v1/v2/v3.

    The momentum encoder is a copy of ``backbone`` + ``neck`` kept in
    ``self.momentum_encoder`` (state-dict prefix ``momentum_encoder.``), its
    parameters frozen. It is NOT updated here: the model declares its
    (online, momentum) module pairs through :meth:`momentum_pairs` and
    :class:`~mocoplug.engine.hooks.MomentumUpdateHook` moves each momentum
    module towards its online one after every optimizer step.

    Without that hook (a key encoder frozen at its initial weights)
    ``MoCoConfigCheckHook`` refuses the run, and in any loop
    :meth:`check_key_encoder_moves` raises at the next training forward.

    Args:
        backbone (dict): Config of the backbone (any mmpretrain backbone).
        neck (dict): Config of the projection neck.
        head (dict): Config of the loss head.
        pretrained (str, optional): Checkpoint of the whole model to load.
            Defaults to None.
        data_preprocessor (dict, optional): Config of the data preprocessor;
            ``SelfSupDataPreprocessor`` if no type is given.
        init_cfg (dict or list[dict], optional): Initialization config dict.
        channels_last (bool): Keep the 4-D weights of both backbones and the
            input views in the channels-last memory format (faster
            convolutions on recent GPUs, and with oneDNN on CPU; measure
            with ``tools/benchmarks/benchmark.py train``). Defaults to
            False.
        encoders_from (str, optional): Continued pretraining: a checkpoint
            (mocoplug, mmpretrain, official MoCo v1/v2/v3, torchvision or
            an extracted backbone; the layout is recognised) whose query
            encoder starts both encoders, the projection too where the
            checkpoint has one that fits
            (:func:`~mocoplug.models.utils.load_encoder_checkpoint`). With
            a queue, ``QueueRefillHook`` fills it with keys of this data
            before the first step. Defaults to None.
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
        # Built here with mocoplug's registry (a child of mmpretrain's) so
        # mocoplug's components resolve even when no default scope is set;
        # mmpretrain's base class would look them up in its own registry.
        data_preprocessor = dict(data_preprocessor or {})
        data_preprocessor.setdefault('type', 'SelfSupDataPreprocessor')
        super().__init__(
            backbone=build_module(backbone),
            neck=build_module(neck),
            head=build_module(head),
            pretrained=pretrained,
            data_preprocessor=build_module(data_preprocessor),
            init_cfg=init_cfg)
        self.channels_last = channels_last
        self.encoders_from = encoders_from
        # See check_key_encoder_moves().
        self._versions_at_start: Optional[Tuple[int, int]] = None
        self._optimizer_stepped = False
        self._key_encoder_seen_moving = False

    def build_momentum_encoder(self) -> None:
        """Create ``self.momentum_encoder`` as a frozen copy of the online
        backbone and neck. Subclasses call it once their online modules are
        final (e.g. after converting BN layers)."""
        if self.channels_last:
            # Only 4-D tensors change; the copy below keeps the format, and
            # so do initialisation, checkpoint loading and .to(device).
            self.backbone.to(memory_format=torch.channels_last)
        self.momentum_encoder = nn.Sequential(
            OrderedDict(
                backbone=copy.deepcopy(self.backbone),
                neck=copy.deepcopy(self.neck)))
        for param in self.momentum_encoder.parameters():
            param.requires_grad_(False)

    def momentum_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        """The (online, momentum) module pairs MomentumUpdateHook updates."""
        return [(self.backbone, self.momentum_encoder.backbone),
                (self.neck, self.momentum_encoder.neck)]

    def init_weights(self) -> None:
        """Initialise the online modules, then copy them into the momentum
        encoder so both start from the same weights (as in the paper).

        When the whole model is loaded from a checkpoint (``pretrained`` /
        a ``Pretrained`` init_cfg), the checkpoint's momentum encoder is
        kept. With ``encoders_from`` the online modules are loaded from it
        first.
        """
        super().init_weights()
        init_cfg = self.init_cfg if isinstance(self.init_cfg,
                                               list) else [self.init_cfg]
        if any(
                isinstance(cfg, dict) and cfg.get('type') == 'Pretrained'
                for cfg in init_cfg):
            return
        if self.encoders_from:
            load_encoder_checkpoint(self.encoders_from, self.backbone,
                                    self.neck)
        for online, momentum in self.momentum_pairs():
            momentum.load_state_dict(online.state_dict())

    def train_step(self, data: Union[dict, tuple, list],
                   optim_wrapper) -> Dict[str, torch.Tensor]:
        """mmengine's training step; notes whether the optimizer stepped,
        for :meth:`check_key_encoder_moves`."""
        log_vars = super().train_step(data, optim_wrapper)
        should_update = getattr(optim_wrapper, 'should_update', None)
        if callable(should_update) and should_update():
            self._optimizer_stepped = True
        return log_vars

    def forward(self,
                inputs: Union[torch.Tensor, List[torch.Tensor]],
                data_samples: Optional[list] = None,
                mode: str = 'tensor'):
        """mmpretrain's forward, with :meth:`check_key_encoder_moves` before
        every training loss (also under DDP, which calls forward)."""
        if mode == 'loss' and self.training:
            self.check_key_encoder_moves()
        return super().forward(inputs, data_samples, mode)

    def check_key_encoder_moves(self) -> None:
        """Raise when an optimizer step has run (seen by :meth:`train_step`,
        or under DDP by the in-place write counters torch keeps on the
        online parameters) but the momentum encoder was never written (its
        counters; MomentumUpdateHook bumps them itself, as CUDA's fused
        foreach kernels do not, and so under DDP on CUDA a foreach
        optimizer's steps go unseen).

        No host sync, and no false alarm under gradient accumulation; once
        the key encoder has moved it is not checked again.
        """
        if self._key_encoder_seen_moving:
            return
        online, momentum = [], []
        for online_module, momentum_module in self.momentum_pairs():
            online += list(online_module.parameters())
            momentum += list(momentum_module.parameters())
        online_writes = sum(p._version for p in online)
        versions = (online_writes, sum(p._version for p in momentum))
        start = self._versions_at_start
        if start is None:
            self._versions_at_start = versions
        elif versions[1] != start[1]:
            self._key_encoder_seen_moving = True
        elif self._optimizer_stepped or versions[0] != start[0]:
            raise RuntimeError(
                f'{type(self).__name__}: an optimizer step updated the '
                'query encoder but nothing updated the momentum (key) '
                'encoder, which would stay frozen at its initial weights. '
                'Add the update hook to the config: custom_hooks = '
                "[dict(type='MomentumUpdateHook', momentum=0.999)] (MoCo "
                "v1/v2), or with schedule='cosine', momentum=0.99 (MoCo "
                'v3); outside a Runner, MomentumUpdateHook.attach(model) '
                'once, then its update(m) after every optimizer step.')

    def views(self, inputs: Union[torch.Tensor, List[torch.Tensor]],
              algorithm: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """The two augmented views of a batch, in the channels-last format
        when ``channels_last`` is set; a clear error when the pipeline does
        not produce exactly two."""
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            got = (f'{len(inputs)} views' if isinstance(inputs, (list, tuple))
                   else f'a single {type(inputs).__name__}')
            raise ValueError(
                f'{algorithm} needs two augmented views per image but got '
                f'{got}: wrap the train pipeline in '
                "dict(type='MultiView', num_views=2, transforms=[...]) "
                '(or num_views=[1, 1] with two transform lists) before '
                'PackInputs.')
        if not self.channels_last:
            return inputs[0], inputs[1]
        return tuple(
            view.contiguous(memory_format=torch.channels_last)
            for view in inputs)
