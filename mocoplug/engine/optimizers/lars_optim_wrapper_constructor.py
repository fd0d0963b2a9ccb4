# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List, Optional

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper
from mmpretrain.engine.optimizers import LARS
from mmpretrain.utils import get_ori_model

from mocoplug.registry import (OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS,
                               OPTIMIZERS)
from .mocov3_lars import MoCoV3LARS


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LARSOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """Exclude 1-D parameters from weight decay and from LARS adaptation.

    As the LARS of `An Empirical Study of Training Self-Supervised Vision
    Transformers <https://arxiv.org/abs/2104.02057>`_ (MoCo v3), by *shape*:
    after mmengine's parameter-wise options, every group of ``ndim <= 1``
    parameters gets ``weight_decay=0`` and ``lars_exclude=True`` (read by
    mmpretrain's ``LARS``). :class:`MoCoV3LARS` refuses this constructor.

    Example::

        optim_wrapper = dict(
            constructor='LARSOptimWrapperConstructor',
            optimizer=dict(type='LARS', lr=9.6, momentum=0.9,
                           weight_decay=1e-6))

    Args:
        optim_wrapper_cfg (dict): The optimizer wrapper config (``LARS``).
        paramwise_cfg (dict, optional): mmengine's; applied first.
    """

    def __init__(self,
                 optim_wrapper_cfg: dict,
                 paramwise_cfg: Optional[dict] = None) -> None:
        super().__init__(optim_wrapper_cfg, paramwise_cfg)
        optimizer_type = self.optimizer_cfg.get('type')
        if isinstance(optimizer_type, str):
            optimizer_type = OPTIMIZERS.get(optimizer_type)
        if isinstance(optimizer_type, type) and issubclass(
                optimizer_type, MoCoV3LARS):
            raise ValueError(
                'LARSOptimWrapperConstructor: MoCoV3LARS excludes 1-D '
                'parameters by shape itself: drop `constructor`.')
        if not (isinstance(optimizer_type, type)
                and issubclass(optimizer_type, LARS)):
            name = getattr(optimizer_type, '__name__',
                           self.optimizer_cfg.get('type'))
            raise ValueError(
                'LARSOptimWrapperConstructor: optim_wrapper.optimizer.type '
                f"must be 'LARS', got {name!r}; otherwise drop the "
                'constructor and use paramwise_cfg=dict(flat_decay_mult=0.).')

    def exclude_flat_params(self, params: List[dict]) -> None:
        """Give every group of 1-D parameters ``weight_decay=0`` and
        ``lars_exclude=True`` (in place)."""
        for group in params:
            if all(p.ndim <= 1 for p in group['params']):
                group['weight_decay'] = 0.
                group['lars_exclude'] = True

    def __call__(self, model: nn.Module) -> OptimWrapper:
        model = get_ori_model(model)
        params: List[dict] = []
        if self.paramwise_cfg:
            self.add_params(params, model)  # one group per parameter
        else:  # frozen ones (the momentum encoder) stay out
            params = [
                dict(params=[p]) for p in model.parameters() if p.requires_grad
            ]
        self.exclude_flat_params(params)
        num_excluded = sum(
            len(g['params']) for g in params if g.get('lars_exclude', False))
        print_log(
            f'LARSOptimWrapperConstructor: {num_excluded} of '
            f'{sum(len(g["params"]) for g in params)} trainable parameters '
            '(ndim <= 1) have no weight decay and no LARS adaptation',
            logger='current')

        optimizer_cfg = self.optimizer_cfg.copy()
        optimizer_cfg['params'] = params
        optimizer = OPTIMIZERS.build(optimizer_cfg)
        return OPTIM_WRAPPERS.build(
            self.optim_wrapper_cfg,
            default_args=dict(type='OptimWrapper', optimizer=optimizer))
