# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, List, Optional, Union

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


@MODELS.register_module()
class MoCo(BaseMomentumSelfSupervisor):
    """MoCo v1 and v2: momentum contrast with a queue of negative keys.

    `Momentum Contrast for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ (He et al., CVPR 2020) and
    `Improved Baselines with Momentum Contrastive Learning
    <https://arxiv.org/abs/2003.04297>`_ (Chen et al., 2020). v1 and v2 are
    configs of this class (linear vs MLP neck, temperature, augmentation).

    Query encoder = ``backbone`` + ``neck``, trained by SGD. Key encoder =
    ``momentum_encoder``, a frozen copy updated by ``MomentumUpdateHook``
    (which must be in ``custom_hooks``). The loss is InfoNCE over the
    positive key and the ``queue``'s negatives; the keys of each batch are
    then enqueued.

    Shuffle BN (``shuffle_bn``) keeps BatchNorm from leaking which key is
    the positive (docs/design_notes.md): ``'ddp'``, the paper's, shuffles
    the gathered key batch across GPUs (no effect in a single process; a
    warning says so); ``'split'``, for one GPU or CPU, normalises every BN
    of both encoders over ``num_splits`` slices and shuffles the keys;
    ``'none'`` for SyncBN or a backbone without BatchNorm.

    Args:
        backbone (dict): Config of the backbone (any mmpretrain backbone).
        neck (dict): Config of the projection neck, e.g.
            ``MoCoProjectionNeck``.
        head (dict): Config of the loss head, e.g. ``InfoNCEHead``.
        queue (dict): Config of the negative-key queue. Its ``dim`` must
            equal the neck's output channels (checked at construction with
            the backbone -> neck channels, see
            :func:`~mocoplug.models.utils.check_feature_dims`). Defaults to
            ``dict(type='NegativeKeyQueue', size=65536, dim=128)``.
        shuffle_bn (str): ``'ddp'``, ``'split'`` or ``'none'``, see above.
            Defaults to ``'ddp'``.
        num_splits (int): Number of BN slices for ``shuffle_bn='split'``.
            Defaults to 8.
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
                 queue: dict = dict(
                     type='NegativeKeyQueue', size=65536, dim=128),
                 shuffle_bn: str = 'ddp',
                 num_splits: int = 8,
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
        if shuffle_bn not in SHUFFLE_BN_MODES:
            raise ValueError(
                f'MoCo: shuffle_bn must be one of {SHUFFLE_BN_MODES}, got '
                f"{shuffle_bn!r}. Use 'ddp' for multi-GPU runs, 'split' for "
                "one GPU/CPU, 'none' with SyncBN.")
        self.shuffle_bn = shuffle_bn
        self.num_splits = num_splits
        if shuffle_bn == 'split':
            if not any(type(m) in SPLITTABLE for m in self.modules()):
                raise ValueError(
                    "MoCo: shuffle_bn='split' found no BatchNorm in the "
                    "backbone/neck to split; use shuffle_bn='none' for this "
                    'backbone (e.g. SyncBN or no BatchNorm).')
            SplitBatchNorm.convert(self.backbone, num_splits)
            SplitBatchNorm.convert(self.neck, num_splits)
        self.queue = build_module(queue)
        check_feature_dims('MoCo', self.backbone, self.neck, self.queue)
        self.build_momentum_encoder()
        self._warned_single_process = False

    @torch.no_grad()
    def encode_keys(self, images: torch.Tensor) -> torch.Tensor:
        """Encode key images with the momentum encoder under Shuffle BN.

        The permutations are drawn on the images' device with its default
        generator: no host synchronisation (see
        :func:`~mocoplug.models.utils.batch_shuffle.batch_shuffle_ddp`).

        Args:
            images (torch.Tensor): Key views, shape (N, C, H, W).

        Returns:
            torch.Tensor: L2-normalised keys (N, D), in the input order, in
            float32 or wider (float64 for a float64 model).
        """
        mode = self.shuffle_bn
        if mode == 'ddp' and get_world_size() == 1:
            if not self._warned_single_process:
                print_log(
                    "MoCo: shuffle_bn='ddp' has no effect in a single "
                    "process; set model.shuffle_bn='split' to emulate it.",
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

    def embed_keys(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised momentum-encoder embeddings of ``images``, in the
        order given, in float32 or wider (no overflow at 1/t under
        autocast; a float64 model stays float64)."""
        return F.normalize(
            at_least_float32(self.momentum_encoder(images)[0]), dim=1)

    def loss(self, inputs: List[torch.Tensor], data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """Compute the InfoNCE loss of a batch and enqueue its keys
        (Algorithm 1 of the paper, plus Shuffle BN in :meth:`encode_keys`).

        Queries and keys are compared in float32 or wider (see
        :func:`~mocoplug.models.utils.at_least_float32`); the head reads the
        queue's buffer itself, no copy, and forms no (N, K + 1) logits.

        Args:
            inputs (List[torch.Tensor]): The two views [query, key], each
                (N, C, H, W).
            data_samples (List[DataSample]): Their data samples; their
                ``sample_idx`` is used when the queue excludes same-instance
                negatives.

        Returns:
            Dict[str, torch.Tensor]: ``loss`` and ``contrast_acc``.
        """
        im_q, im_k = self.views(inputs, 'MoCo')
        ids = None
        if self.queue.exclude_same_instance:
            ids = sample_indices(data_samples, im_q.device)
        query = F.normalize(
            at_least_float32(self.neck(self.backbone(im_q))[0]), dim=1)
        key = self.encode_keys(im_k)  # no gradient, under Shuffle BN
        losses = self.head(query, key, self.queue(),
                           self.queue.same_instance_mask(ids))
        self.queue.enqueue(key, ids)  # negatives from the next step on
        return losses


def sample_indices(data_samples: Optional[List[DataSample]],
                   device: torch.device) -> torch.Tensor:
    """Dataset indices of a batch, from the ``sample_idx`` that mmpretrain's
    ``PackInputs`` stores in every data sample, on ``device``.

    Built on the host and copied from pinned memory with
    ``non_blocking=True`` on CUDA (queued on the current stream ahead of its
    readers), so the host does not wait for the work queued before it.
    """
    if not data_samples or 'sample_idx' not in data_samples[0]:
        raise ValueError(
            'exclude_same_instance=True needs the dataset index of every '
            "image: keep 'sample_idx' in PackInputs' meta_keys (it is there "
            'by default) and use a dataset derived from mmengine BaseDataset.')
    ids = torch.tensor([int(s.sample_idx) for s in data_samples],
                       dtype=torch.long,
                       pin_memory=torch.device(device).type == 'cuda')
    return ids.to(device, non_blocking=True)
