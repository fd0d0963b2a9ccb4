# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, List, Optional, Union

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
    """MoCo v3: symmetric momentum contrast with in-batch negatives.

    `An Empirical Study of Training Self-Supervised Vision Transformers
    <https://arxiv.org/abs/2104.02057>`_ (Chen, Xie, He, ICCV 2021).

    Query branch = ``backbone`` + ``neck`` (the projector) + ``predictor``;
    momentum branch = a frozen copy of ``backbone`` + ``neck`` updated by
    ``MomentumUpdateHook`` (cosine, 0.99 to 1). The loss is symmetric,
    ``ctr(q1, k2) + ctr(q2, k1)``, InfoNCE against the keys of the whole
    global batch (the positive of query i on rank r is key ``r * N + i``).
    The paper's code multiplies the loss by ``2 * tau``: set the head's
    ``loss=dict(type='CrossEntropyLoss', loss_weight=2 * tau)``. An
    optional ``queue`` replaces the in-batch negatives (both views' keys
    are enqueued after the loss).

    Args:
        backbone (dict): Config of the backbone: ResNet, or mmpretrain's
            ``MoCoV3ViT`` (frozen random patch projection via
            ``stop_grad_conv1``, 2-D sin-cos position embedding).
        neck (dict): Config of the projector (``MoCoProjectionNeck``,
            Linear-BN-ReLU blocks without bias and a last BN without
            affine): 2 layers 2048-4096-256 for ResNet-50, 3 layers
            embed-4096-4096-256 for ViT.
        head (dict): Config of the loss head (``InfoNCEHead``).
        predictor (dict): Config of the predictor (``MoCoProjectionNeck``
            with ``with_avg_pool=False``), 2 layers 256-4096-256. As in the
            official ``moco/builder.py``, its last BN (affine-free) is used
            with ViT (``with_last_bn=True``) but not with ResNet.
        queue (dict, optional): Config of a negative-key queue to use
            instead of in-batch negatives. Defaults to None.

        pretrained (str, optional): Checkpoint of the whole model to load.
        data_preprocessor (dict, optional): Config of the data preprocessor;
            ``SelfSupDataPreprocessor`` if no type is given.
        init_cfg (dict or list[dict], optional): Initialization config dict.
        channels_last (bool): Channels-last weights and inputs, see
            :class:`BaseMomentumSelfSupervisor`. Defaults to False.
        encoders_from (str, optional): Continued pretraining from released
            weights, see :class:`BaseMomentumSelfSupervisor`. Defaults to
            None.
    """

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 predictor: dict,
                 queue: Optional[dict] = None,
                 pretrained: Optional[str] = None,
                 data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[Union[List[dict], dict]] = None,
                 channels_last: bool = False,
                 encoders_from: Optional[str] = None) -> None:
        super().__init__(
            backbone=backbone,
            neck=neck,
            head=head,
            pretrained=pretrained,
            data_preprocessor=data_preprocessor,
            init_cfg=init_cfg,
            channels_last=channels_last,
            encoders_from=encoders_from)
        if predictor is None:
            raise ValueError(
                'MoCoV3: `predictor` is required (the query branch is '
                'backbone + projector + predictor), e.g. predictor=dict('
                "type='MoCoProjectionNeck', in_channels=256, "
                'hid_channels=4096, out_channels=256, num_layers=2, '
                'with_bias=False, with_bn=True, with_avg_pool=False).')
        self.predictor = build_module(predictor)
        self.queue = build_module(queue)
        check_feature_dims('MoCoV3', self.backbone, self.neck, self.queue,
                           self.predictor)
        self.build_momentum_encoder()

    def contrast(self, query: torch.Tensor, key: torch.Tensor,
                 ids: Optional[torch.Tensor]) -> Dict[str, torch.Tensor]:
        """InfoNCE of predicted queries against keys.

        Args:
            query (torch.Tensor): Predictor outputs (N, C), not normalised.
            key (torch.Tensor): Momentum-branch outputs (N, C) of the other
                view, not normalised.
            ids (torch.Tensor, optional): Dataset indices of the batch, used
                by a queue that excludes same-instance negatives.

        Returns:
            Dict[str, torch.Tensor]: ``loss`` and ``contrast_acc``.
        """
        # float32 or wider: no overflow at 1/t under autocast
        query = F.normalize(at_least_float32(query), dim=1)
        key = F.normalize(at_least_float32(key), dim=1)
        if self.queue is not None:
            if self.queue.dim != query.shape[1]:
                raise ValueError(
                    f'MoCoV3: queue.dim={self.queue.dim} but the projector '
                    f'and predictor output {query.shape[1]} channels; set '
                    "the queue's `dim` to the neck's out_channels.")
            return self.head(query, key, self.queue(),
                             self.queue.same_instance_mask(ids))
        # In-batch negatives of the global batch; the positive's column is
        # masked out of the negatives (it is the positive, `key`). Every
        # rank holds a batch of the same size (the gather needs it; the
        # sampler guarantees it, checked by MoCoConfigCheckHook), so the
        # positive of query i is key rank * N + i.
        n = query.shape[0]
        world_size = get_world_size()
        keys = torch.cat(all_gather(key), dim=0) if world_size > 1 else key
        mask = torch.zeros(
            n, keys.shape[0], dtype=torch.bool, device=query.device)
        mask.diagonal(n * get_rank()).fill_(True)
        return self.head(query, key, keys, mask)

    def loss(self, inputs: List[torch.Tensor], data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """Compute the symmetric loss ``ctr(q1, k2) + ctr(q2, k1)``.

        Args:
            inputs (List[torch.Tensor]): The two views, each (N, C, H, W).
            data_samples (List[DataSample]): Their data samples.

        Returns:
            Dict[str, torch.Tensor]: ``loss`` (sum of both terms) and
            ``contrast_acc`` (mean of both terms).
        """
        view_1, view_2 = self.views(inputs, 'MoCoV3')
        ids = None
        if self.queue is not None and self.queue.exclude_same_instance:
            ids = sample_indices(data_samples, view_1.device)
        q1 = self.predictor(self.neck(self.backbone(view_1)))[0]
        q2 = self.predictor(self.neck(self.backbone(view_2)))[0]
        with torch.no_grad():
            k1 = self.momentum_encoder(view_1)[0]
            k2 = self.momentum_encoder(view_2)[0]
        term_1 = self.contrast(q1, k2, ids)
        term_2 = self.contrast(q2, k1, ids)
        if self.queue is not None:  # negatives from the next step on
            keys = F.normalize(at_least_float32(torch.cat([k1, k2])), dim=1)
            self.queue.enqueue(keys,
                               None if ids is None else torch.cat([ids, ids]))
        return dict(
            loss=term_1['loss'] + term_2['loss'],
            contrast_acc=(term_1['contrast_acc'] + term_2['contrast_acc']) / 2)
