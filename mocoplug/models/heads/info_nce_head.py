# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, List, Optional, Union

import torch
from mmengine.model import BaseModule
from mmpretrain.models.losses import CrossEntropyLoss
from torch import Tensor

from mocoplug.registry import MODELS
from ..utils.fused_info_nce import fused_info_nce
from ..utils.precision import similarity_dtype


@MODELS.register_module()
class InfoNCEHead(BaseModule):
    """InfoNCE loss, eq. (1) of `Momentum Contrast for Unsupervised Visual
    Representation Learning <https://arxiv.org/abs/1911.05722>`_, and
    ``contrast_acc``, the percentage of positives above every negative.

    Args:
        temperature (float): Temperature t (0.07 for MoCo v1, 0.2 for v2).
        loss (dict): The classification loss (v3: ``loss_weight=2 t``).
        init_cfg (dict or list[dict], optional): Initialization config dict.
    """

    def __init__(self,
                 temperature: float = 0.2,
                 loss: dict = dict(type='CrossEntropyLoss'),
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if temperature <= 0:
            raise ValueError('InfoNCEHead: `temperature` must be > 0, got '
                             f'{temperature}')
        self.temperature, self.loss_module = temperature, MODELS.build(loss)

    def loss(self,
             pos: Tensor,
             neg: Tensor,
             neg_mask: Optional[Tensor] = None) -> Dict[str, Tensor]:
        """``loss`` and ``contrast_acc`` from positive (N, 1) and negative
        (N, K) similarities, less those ``neg_mask`` flags."""
        if neg_mask is not None:
            neg = neg.masked_fill(neg_mask, float('-inf'))
        logits = torch.cat((pos, neg), dim=1).div_(self.temperature)
        labels = logits.new_zeros(logits.shape[0], dtype=torch.long)
        loss = self.loss_module(logits, labels)
        with torch.no_grad():
            acc = (neg.max(dim=1).values < pos.squeeze(1)).float().mean() * 100
        return dict(loss=loss, contrast_acc=acc)

    def loss_against(self,
                     query: Tensor,
                     key: Tensor,
                     negatives: Tensor,
                     neg_mask: Optional[Tensor] = None) -> Dict[str, Tensor]:
        """:meth:`loss` from L2-normalised queries, keys (N, C) and negatives
        (M, C); fused for the default loss when the keys need no gradient."""
        ce = self.loss_module  # fused: the plain softmax cross-entropy
        if (type(ce) is CrossEntropyLoss and not ce.use_sigmoid
                and not ce.use_soft and ce.reduction == 'mean'
                and ce.class_weight is None
                and not (key.requires_grad or negatives.requires_grad)):
            loss, hits = fused_info_nce(query, key, negatives,
                                        self.temperature, neg_mask)
            if ce.loss_weight != 1:
                loss = loss * ce.loss_weight
            return dict(loss=loss, contrast_acc=hits.float().mean() * 100)
        with torch.autocast(query.device.type, enabled=False):
            dtype = similarity_dtype(query, key, negatives)
            query = query.to(dtype)
            pos = (query * key.to(dtype)).sum(dim=1, keepdim=True)
            neg = query @ negatives.to(dtype).t()
        return self.loss(pos, neg, neg_mask)

    def forward(self, *args, **kwargs) -> Dict[str, Tensor]:
        """Same as :meth:`loss_against` (so forward hooks see its inputs)."""
        return self.loss_against(*args, **kwargs)
