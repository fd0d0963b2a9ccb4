# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCo's queue of negative keys, written when the queue is next read."""
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from mmengine.dist import all_gather, get_world_size
from mmengine.model import BaseModule
from torch import Tensor

from mocoplug.registry import MODELS
from ..utils.precision import similarity_dtype


@MODELS.register_module()
class NegativeKeyQueue(BaseModule):
    """FIFO queue of L2-normalised negative keys, the dictionary of
    `Momentum Contrast for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_; keys never below ``float32``.

    Args:
        size (int): Number of keys K kept in the queue.
        dim (int): Dimension C of a key.
        gather (bool): Whether :meth:`enqueue` all-gathers every rank's keys.
        exclude_same_instance (bool): Whether to store the keys' dataset
            indices for :meth:`same_instance_mask`.
        init_cfg (dict or list[dict], optional): Initialization config dict.
    """

    def __init__(self,
                 size: int = 65536,
                 dim: int = 128,
                 gather: bool = True,
                 exclude_same_instance: bool = False,
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        for name, value in (('size', size), ('dim', dim)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f'NegativeKeyQueue: `{name}` must be a '
                                 f'positive int, got {value!r}')
        self.size, self.dim, self.gather = size, dim, gather
        self.exclude_same_instance = exclude_same_instance
        self.register_buffer('keys',
                             F.normalize(torch.randn(size, dim), dim=1))
        self.register_buffer('ptr', torch.zeros((), dtype=torch.long))
        if exclude_same_instance:
            self.register_buffer('ids',
                                 torch.full((size, ), -1, dtype=torch.long))
        self._pending: List[Tuple[Tensor, Optional[Tensor]]] = []
        self.register_forward_pre_hook(NegativeKeyQueue._write_pending)

    def forward(self) -> Tensor:
        """The queued keys (K, C), the buffer itself."""
        return self.keys

    @torch.no_grad()
    def enqueue(self, keys: Tensor, ids: Optional[Tensor] = None) -> None:
        """Push L2-normalised keys (N, C) and, with
        ``exclude_same_instance``, their dataset indices (N,)."""
        if keys.dim() != 2 or keys.shape[1] != self.dim:
            raise ValueError(f'NegativeKeyQueue: keys {tuple(keys.shape)}, '
                             f'expected (N, {self.dim}); set `dim` to the '
                             "neck's out_channels")
        if self.exclude_same_instance and ids is None:
            raise ValueError('NegativeKeyQueue: exclude_same_instance needs '
                             "the keys' `sample_idx`")
        if self.gather and get_world_size() > 1:
            keys = torch.cat(all_gather(keys), dim=0)
            if self.exclude_same_instance:
                ids = torch.cat(all_gather(ids.to(keys.device)), dim=0)
        self._pending.append((keys.detach().to(self.keys.dtype),
                              ids.to(self.keys.device, torch.long)
                              if self.exclude_same_instance else None))

    @torch.no_grad()
    def _write_pending(self, *hook_args) -> None:
        """Write the pending batches, in order (also before each forward)."""
        pending, self._pending = self._pending, []
        for keys, ids in pending:
            write_ring(self.keys, self.ptr, getattr(self, 'ids', None), keys,
                       ids)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """Save as if the pending keys were written (the buffer as it is)."""
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if not self._pending:
            return
        names = ('keys', 'ptr', 'ids')[:3 if self.exclude_same_instance else 2]
        state = {name: getattr(self, name).clone() for name in names}
        for new_keys, new_ids in self._pending:
            write_ring(state['keys'], state['ptr'], state.get('ids'), new_keys,
                       new_ids)
        destination.update({prefix + k: v for k, v in state.items()})

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Loading replaces the queue and drops the pending keys."""
        self._pending = []
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def same_instance_mask(self, ids: Optional[Tensor]) -> Optional[Tensor]:
        """Bool (N, K), True where a queued key is of the query's image
        (``ids``: dataset indices); None unless ``exclude_same_instance``."""
        if not self.exclude_same_instance:
            return None
        if ids is None:
            raise ValueError('NegativeKeyQueue: exclude_same_instance needs '
                             "the queries' `sample_idx`")
        self._write_pending()
        return ids.to(self.ids.device).view(-1, 1) == self.ids.view(1, -1)

    def _apply(self, fn, *args, **kwargs):
        """Write the pending keys, then convert; keys stay float32 or wider."""
        self._write_pending()
        keys = self.keys
        super()._apply(fn, *args, **kwargs)
        if self.keys.dtype != similarity_dtype(self.keys):
            self.keys = keys.to(self.keys.device, torch.float32)
        return self

    def extra_repr(self) -> str:
        return (f'size={self.size}, dim={self.dim}, gather={self.gather}, '
                f'exclude_same_instance={self.exclude_same_instance}')


@torch.no_grad()
def write_ring(buffer: Tensor, ptr: Tensor, id_buffer: Optional[Tensor],
               keys: Tensor, ids: Optional[Tensor]) -> None:
    """Write keys into a ring buffer in place, advancing ``ptr``, in order."""
    size, n = buffer.shape[0], keys.shape[0]
    offset = max(n - size, 0)
    keys = keys[offset:].to(buffer.dtype)
    slots = (ptr + offset +
             torch.arange(keys.shape[0], device=buffer.device)) % size
    buffer.index_copy_(0, slots, keys)
    if id_buffer is not None:
        id_buffer.index_copy_(0, slots, ids[offset:])
    ptr.add_(n).remainder_(size)
