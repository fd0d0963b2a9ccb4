# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from mmengine.dist import all_gather, get_rank, get_world_size
from mmpretrain.structures import DataSample

from mocoplug.registry import MODELS
from ..utils import at_least_float32, check_feature_dims
from .base_momentum import BaseMomentumSelfSupervisor, build_module
from .moco import sample_indices


@MODELS.register_module()
class MoCoV3(BaseMomentumSelfSupervisor):
    """MoCo v3, symmetric momentum contrast with in-batch negatives: `An
    Empirical Study of Training Self-Supervised Vision Transformers
    <https://arxiv.org/abs/2104.02057>`_ (Chen, Xie, He, ICCV 2021).

    Args:
        backbone, neck, head (dict): The backbone, projector and loss head.
        predictor (dict): The predictor (last BN only with ViT, as the
            official ``moco/builder.py``).
        queue (dict, optional): A queue of negatives instead of the batch's.
        **kwargs: The other arguments of :class:`BaseMomentumSelfSupervisor`.
    """

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 predictor: dict,
                 queue: Optional[dict] = None,
                 **kwargs) -> None:
        super().__init__(backbone=backbone, neck=neck, head=head, **kwargs)
        if predictor is None:
            raise ValueError("MoCoV3: `predictor` is required, e.g. dict("
                             "type='MoCoProjectionNeck', num_layers=2, ...)")
        self.predictor = build_module(predictor)
        self.queue = build_module(queue)
        check_feature_dims('MoCoV3', self.backbone, self.neck, self.queue,
                           self.predictor)
        self.build_momentum_encoder()

    def contrast(self, query: torch.Tensor, key: torch.Tensor,
                 ids: Optional[torch.Tensor]) -> Dict[str, torch.Tensor]:
        """InfoNCE of queries (N, C) against the other view's keys (N, C),
        neither normalised; ``ids``: dataset indices for the queue."""
        query = F.normalize(at_least_float32(query), dim=1)
        key = F.normalize(at_least_float32(key), dim=1)
        if self.queue is not None:
            if self.queue.dim != query.shape[1]:
                raise ValueError(f'MoCoV3: set queue.dim={query.shape[1]}, '
                                 "the neck's out_channels")
            return self.head(query, key, self.queue(),
                             self.queue.same_instance_mask(ids))
        n, world_size = query.shape[0], get_world_size()
        keys = torch.cat(all_gather(key), dim=0) if world_size > 1 else key
        mask = torch.zeros(
            n, keys.shape[0], dtype=torch.bool, device=query.device)
        mask.diagonal(n * get_rank()).fill_(True)
        return self.head(query, key, keys, mask)

    def loss(self, inputs: List[torch.Tensor], data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """``loss`` ``ctr(q1, k2) + ctr(q2, k1)``; mean ``contrast_acc``."""
        view_1, view_2 = self.views(inputs, 'MoCoV3')
        ids = sample_indices(self.queue, data_samples, view_1.device)
        q1 = self.predictor(self.neck(self.backbone(view_1)))[0]
        q2 = self.predictor(self.neck(self.backbone(view_2)))[0]
        with torch.no_grad():
            k1 = self.momentum_encoder(view_1)[0]
            k2 = self.momentum_encoder(view_2)[0]
        term_1, term_2 = self.contrast(q1, k2, ids), self.contrast(q2, k1, ids)
        if self.queue is not None:  # negatives from the next step on
            keys = F.normalize(at_least_float32(torch.cat([k1, k2])), dim=1)
            self.queue.enqueue(keys,
                               None if ids is None else torch.cat([ids, ids]))
        return dict(
            loss=term_1['loss'] + term_2['loss'],
            contrast_acc=(term_1['contrast_acc'] + term_2['contrast_acc']) / 2)
