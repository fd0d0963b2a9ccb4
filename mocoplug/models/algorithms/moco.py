# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from mmengine.dist import get_world_size
from mmengine.logging import print_log
from mmpretrain.structures import DataSample

from mocoplug.registry import MODELS
from ..utils import SplitBatchNorm, at_least_float32, check_feature_dims
from ..utils.batch_shuffle import batch_shuffle_ddp, batch_unshuffle_ddp
from ..utils.split_batch_norm import SPLITTABLE
from .base_momentum import BaseMomentumSelfSupervisor, build_module

SHUFFLE_BN_MODES = ('ddp', 'split', 'none')
CHOOSE = ("'ddp' on several GPUs/processes, 'split' on one GPU or CPU, "
          "'none' only with SyncBN or no BN")


@MODELS.register_module()
class MoCo(BaseMomentumSelfSupervisor):
    """MoCo v1 and v2, momentum contrast with a queue of negative keys:
    `Momentum Contrast for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ (He et al., CVPR 2020) and
    `Improved Baselines with Momentum Contrastive Learning
    <https://arxiv.org/abs/2003.04297>`_ (Chen et al., 2020), as configs.

    Args:
        backbone, neck, head (dict): The backbone, projection neck and head.
        queue (dict): The negative-key queue.
        shuffle_bn (str): Shuffle BN: ``'ddp'`` (the paper's, across
            processes), ``'split'`` (BN slices, one GPU or CPU) or ``'none'``.
        num_splits (int): BN slices for ``'split'``.
        **kwargs: The other arguments of :class:`BaseMomentumSelfSupervisor`.
    """

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 queue: dict = dict(
                     type='NegativeKeyQueue', size=65536, dim=128),
                 shuffle_bn: str = 'ddp',
                 num_splits: int = 8,
                 **kwargs) -> None:
        super().__init__(backbone=backbone, neck=neck, head=head, **kwargs)
        if shuffle_bn not in SHUFFLE_BN_MODES:
            raise ValueError(f'MoCo: shuffle_bn must be one of '
                             f'{SHUFFLE_BN_MODES}, got {shuffle_bn!r}: '
                             f'{CHOOSE}')
        self.shuffle_bn, self.num_splits = shuffle_bn, num_splits
        if shuffle_bn == 'split':
            if not any(type(m) in SPLITTABLE for m in self.modules()):
                raise ValueError("MoCo: shuffle_bn='split' found no "
                                 f"BatchNorm: {CHOOSE}")
            SplitBatchNorm.convert(self.backbone, num_splits)
            SplitBatchNorm.convert(self.neck, num_splits)
        self.queue = build_module(queue)
        check_feature_dims('MoCo', self.backbone, self.neck, self.queue)
        self.build_momentum_encoder()
        self._warned_single_process = False

    @torch.no_grad()
    def encode_keys(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised keys (N, D) of key views, under Shuffle BN."""
        mode = self.shuffle_bn
        if mode == 'ddp' and get_world_size() == 1:
            if not self._warned_single_process:
                print_log(
                    "MoCo: shuffle_bn='ddp' does nothing in one process: "
                    f"{CHOOSE}",
                    logger='current',
                    level=30)
                self._warned_single_process = True
            mode = 'none'
        if mode == 'ddp':
            images, perm = batch_shuffle_ddp(images)
            return batch_unshuffle_ddp(self.embed_keys(images), perm)
        if mode == 'split':
            perm = torch.randperm(images.shape[0], device=images.device)
            return self.embed_keys(images[perm])[torch.argsort(perm)]
        return self.embed_keys(images)

    def loss(self, inputs: List[torch.Tensor], data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """``loss`` and ``contrast_acc`` of [query, key] views, then enqueue
        the keys (Algorithm 1 of the paper)."""
        im_q, im_k = self.views(inputs, 'MoCo')
        ids = sample_indices(self.queue, data_samples, im_q.device)
        query = F.normalize(
            at_least_float32(self.neck(self.backbone(im_q))[0]), dim=1)
        key = self.encode_keys(im_k)  # no gradient, under Shuffle BN
        losses = self.head(query, key, self.queue(),
                           self.queue.same_instance_mask(ids))
        self.queue.enqueue(key, ids)  # negatives from the next step on
        return losses


def sample_indices(queue, data_samples: Optional[List[DataSample]],
                   device: torch.device) -> Optional[torch.Tensor]:
    """``sample_idx`` on ``device`` where ``queue`` needs them, else None."""
    if queue is None or not queue.exclude_same_instance:
        return None
    if not data_samples or 'sample_idx' not in data_samples[0]:
        raise ValueError("exclude_same_instance=True needs 'sample_idx' in "
                         "PackInputs' meta_keys")
    ids = torch.tensor([int(s.sample_idx) for s in data_samples],
                       dtype=torch.long,
                       pin_memory=torch.device(device).type == 'cuda')
    return ids.to(device, non_blocking=True)
