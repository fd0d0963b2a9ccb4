# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List, Optional, Union

import torch
import torch.nn.functional as F
from mmengine.dist import all_gather, get_world_size
from mmengine.model import BaseModule

from mocoplug.registry import MODELS


@MODELS.register_module()
class NegativeKeyQueue(BaseModule):
    """FIFO queue of L2-normalised keys used as negatives by MoCo.

    Implements the dictionary-as-a-queue of `Momentum Contrast for
    Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ (He et al., CVPR 2020): the keys of
    the most recent mini-batches are kept, the oldest are overwritten.

    Unlike the reference implementations this queue accepts any batch size:
    writes wrap around the end of the buffer, and a batch larger than the
    queue keeps its newest ``size`` keys. So ``size`` need not be a multiple
    of the (global) batch size and a short last batch is fine.

    The keys, the write pointer and (optionally) the instance ids of the
    stored keys are persistent buffers, so checkpoints and ``--resume``
    carry the queue.

    Precision: the keys are always stored in ``float32`` whatever the dtype
    of the incoming keys (e.g. ``float16`` under AMP); :meth:`forward`
    returns them in ``float32`` and autocast casts them for the matmul.

    Args:
        size (int): Number of keys K kept in the queue. Defaults to 65536.
        dim (int): Dimension C of a key. Defaults to 128.
        gather (bool): Whether :meth:`enqueue` all-gathers the keys of every
            rank first, so all ranks keep the same queue. Every rank must
            then enqueue the same number of keys per call (as with
            ``DefaultSampler``). Defaults to True.
        exclude_same_instance (bool): Whether to remember the dataset index
            of every stored key so that :meth:`same_instance_mask` can mask
            older keys of the very image being queried out of the loss
            (false negatives that appear when the dataset is not much larger
            than the queue). Defaults to False.
        init_cfg (dict or list[dict], optional): Initialization config dict.
            Defaults to None.
    """

    def __init__(self,
                 size: int = 65536,
                 dim: int = 128,
                 gather: bool = True,
                 exclude_same_instance: bool = False,
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if not isinstance(size, int) or size <= 0:
            raise ValueError('NegativeKeyQueue: `size` must be a positive '
                             f'int, got {size!r}')
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(
                f'NegativeKeyQueue: `dim` must be a positive int, got {dim!r}')
        self.size = size
        self.dim = dim
        self.gather = gather
        self.exclude_same_instance = exclude_same_instance
        self.register_buffer('keys',
                             F.normalize(torch.randn(size, dim), dim=1))
        self.register_buffer('ptr', torch.zeros((), dtype=torch.long))
        if exclude_same_instance:
            # -1 marks the random initial keys, which belong to no image.
            self.register_buffer('ids',
                                 torch.full((size, ), -1, dtype=torch.long))

    def forward(self) -> torch.Tensor:
        """Return a snapshot of the queued keys, shape (K, C).

        A copy is returned because :meth:`enqueue` overwrites the buffer in
        place after the loss was computed but before the backward pass,
        which needs the keys the logits were computed with.
        """
        return self.keys.clone()

    @torch.no_grad()
    def enqueue(self,
                keys: torch.Tensor,
                ids: Optional[torch.Tensor] = None) -> None:
        """Push a batch of keys (and their instance ids), dropping the oldest.

        Args:
            keys (torch.Tensor): L2-normalised keys of shape (N, C).
            ids (torch.Tensor, optional): Dataset indices of the N keys.
                Required when ``exclude_same_instance=True``.
        """
        if keys.dim() != 2 or keys.shape[1] != self.dim:
            raise ValueError(
                'NegativeKeyQueue.enqueue: expected keys of shape '
                f'(N, {self.dim}), got {tuple(keys.shape)}; set the queue '
                "`dim` to the neck's out_channels")
        if self.exclude_same_instance and ids is None:
            raise ValueError(
                'NegativeKeyQueue.enqueue: exclude_same_instance=True needs '
                'the instance ids of the keys (the `sample_idx` PackInputs '
                'stores)')
        if self.gather and get_world_size() > 1:
            keys = torch.cat(all_gather(keys), dim=0)
            if self.exclude_same_instance:
                ids = torch.cat(all_gather(ids.to(keys.device)), dim=0)
        n = keys.shape[0]
        offset = 0
        if n > self.size:
            # Only the newest `size` keys survive; they go where they would
            # have landed had the batch been written key by key.
            offset = n - self.size
            keys = keys[offset:]
            ids = ids[offset:] if ids is not None else None
        # Computed on the device: no host sync in the training step.
        slots = (self.ptr + offset + torch.arange(
            keys.shape[0], device=self.keys.device)) % self.size
        self.keys.index_copy_(0, slots, keys.to(self.keys.dtype))
        if self.exclude_same_instance:
            self.ids.index_copy_(0, slots, ids.to(self.ids.device, torch.long))
        self.ptr.add_(n).remainder_(self.size)

    def same_instance_mask(
            self, ids: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Mask of queued keys that belong to the same image as each query.

        Args:
            ids (torch.Tensor, optional): Dataset indices of the N queries.

        Returns:
            torch.Tensor or None: Bool tensor of shape (N, K), True where the
            queued key is an older key of the query's own image; None when
            ``exclude_same_instance`` is off.
        """
        if not self.exclude_same_instance:
            return None
        if ids is None:
            raise ValueError(
                'NegativeKeyQueue: exclude_same_instance=True needs the query '
                'instance ids (the `sample_idx` PackInputs stores)')
        return ids.to(self.ids.device).view(-1, 1) == self.ids.view(1, -1)

    def extra_repr(self) -> str:
        return (f'size={self.size}, dim={self.dim}, gather={self.gather}, '
                f'exclude_same_instance={self.exclude_same_instance}')
