# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCo's queue of negative keys.

Contract: the keys given to :meth:`NegativeKeyQueue.enqueue` at step t are
negatives from step t + 1 on. ``enqueue`` only appends to a pending list;
calling the queue, ``queue()`` (the one accessor of the keys), writes the
pending keys first. The loss of step t + 1 reads after the backward of step
t, so the buffer that backward needs is never written under it, and no copy
of the queue is made per step. ``state_dict`` saves the queue as if the
pending keys were written (the checkpoint format does not change).
"""
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from mmengine.dist import all_gather, get_world_size
from mmengine.model import BaseModule

from mocoplug.registry import MODELS
from ..utils.precision import similarity_dtype


@MODELS.register_module()
class NegativeKeyQueue(BaseModule):
    """FIFO queue of L2-normalised keys used as negatives by MoCo.

    Implements the dictionary-as-a-queue of `Momentum Contrast for
    Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ (He et al., CVPR 2020): the keys of
    the most recent mini-batches are kept, the oldest are overwritten.

    Any batch size works (writes wrap around; a batch larger than the
    queue keeps its newest ``size`` keys). The keys, write pointer and
    optional instance ids are persistent buffers, so checkpoints carry the
    queue. Pending keys (see the module notes) are written by a forward
    pre-hook, by :meth:`same_instance_mask` and by ``.to()`` / ``.double()``;
    loading a state dict drops them. A graph that read the buffer before
    such a write cannot be backpropagated through (autograd raises rather
    than compute a wrong gradient). The keys are stored in the model's
    floating dtype, never below ``float32`` (docs/design_notes.md).

    Args:
        size (int): Number of keys K kept in the queue. Defaults to 65536.
        dim (int): Dimension C of a key. Defaults to 128.
        gather (bool): Whether :meth:`enqueue` all-gathers the keys of every
            rank first, so all ranks keep the same queue. Every rank must
            then enqueue the same number of keys per call: mmengine's
            ``DefaultSampler`` / ``InfiniteSampler`` guarantee it, and
            ``MoCoConfigCheckHook`` refuses other samplers before a
            distributed run. Defaults to True.
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
        # Batches (keys, ids) enqueued and not yet written, in order.
        self._pending: List[Tuple[torch.Tensor, Optional[torch.Tensor]]] = []
        self.register_forward_pre_hook(_write_pending_before_forward)

    def forward(self) -> torch.Tensor:
        """The queued keys (K, C), every enqueued batch written: the buffer
        itself, no copy.

        The loss calls the queue once per step; anything inspecting it after
        a step (monitors, tests) calls it too.
        """
        return self.keys

    @torch.no_grad()
    def enqueue(self,
                keys: torch.Tensor,
                ids: Optional[torch.Tensor] = None) -> None:
        """Push a batch of keys (and their instance ids), dropping the oldest
        when the queue is next read.

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
        keys = keys.detach().to(self.keys.dtype)
        if self.exclude_same_instance:
            ids = ids.to(self.keys.device, torch.long)
        self._pending.append(
            (keys, ids if self.exclude_same_instance else None))

    @torch.no_grad()
    def _write_pending(self) -> None:
        """Write the pending batches into the buffers, in order."""
        pending, self._pending = self._pending, []
        for keys, ids in pending:
            write_ring(self.keys, self.ptr,
                       self.ids if self.exclude_same_instance else None, keys,
                       ids)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """Save the queue as if the pending keys were written, without
        writing them (a backward may still need the buffer)."""
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if not self._pending:
            return
        keys, ptr = self.keys.clone(), self.ptr.clone()
        ids = self.ids.clone() if self.exclude_same_instance else None
        for new_keys, new_ids in self._pending:
            write_ring(keys, ptr, ids, new_keys, new_ids)
        destination[prefix + 'keys'] = keys
        destination[prefix + 'ptr'] = ptr
        if ids is not None:
            destination[prefix + 'ids'] = ids

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Loading replaces the queue: pending keys belong to the old one
        and are dropped."""
        self._pending = []
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

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
        self._write_pending()
        return ids.to(self.ids.device).view(-1, 1) == self.ids.view(1, -1)

    def _apply(self, fn, *args, **kwargs):
        """``.to()``, ``.double()``, ``.half()``... write the pending keys,
        then move the buffers as for any module, but the keys never drop
        below ``float32`` (see the class notes): converted from their value
        before the call, not rounded through the lower precision."""
        self._write_pending()
        keys = self.keys
        super()._apply(fn, *args, **kwargs)
        if self.keys.dtype != similarity_dtype(self.keys):
            self.keys = keys.to(self.keys.device, torch.float32)
        return self

    def extra_repr(self) -> str:
        return (f'size={self.size}, dim={self.dim}, gather={self.gather}, '
                f'exclude_same_instance={self.exclude_same_instance}')


def _write_pending_before_forward(queue: NegativeKeyQueue, args) -> None:
    """Forward pre-hook: every read of the queue sees every enqueued key."""
    queue._write_pending()


@torch.no_grad()
def write_ring(buffer: torch.Tensor, ptr: torch.Tensor,
               id_buffer: Optional[torch.Tensor], keys: torch.Tensor,
               ids: Optional[torch.Tensor]) -> None:
    """Write a batch into a ring buffer in place, advancing ``ptr``.

    A batch larger than the buffer keeps its newest keys, each in the slot it
    would have reached had the batch been written key by key. The slots are
    computed on the device: no host sync in the training step.
    """
    size, n = buffer.shape[0], keys.shape[0]
    offset = max(n - size, 0)
    keys = keys[offset:].to(buffer.dtype)
    slots = (ptr + offset +
             torch.arange(keys.shape[0], device=buffer.device)) % size
    buffer.index_copy_(0, slots, keys)
    if id_buffer is not None:
        id_buffer.index_copy_(0, slots, ids[offset:])
    ptr.add_(n).remainder_(size)
