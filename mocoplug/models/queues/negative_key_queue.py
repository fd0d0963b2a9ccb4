# Copyright (c) mocoplug contributors. All rights reserved.
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

    Unlike the reference implementations this queue accepts any batch size:
    writes wrap around the end of the buffer, and a batch larger than the
    queue keeps its newest ``size`` keys. So ``size`` need not be a multiple
    of the (global) batch size and a short last batch is fine.

    The keys, the write pointer and (optionally) the instance ids of the
    stored keys are persistent buffers, so checkpoints and ``--resume``
    carry the queue.

    No copy of the queue per step: :meth:`read` and :meth:`logits` give the
    loss the buffer itself, and the backward pass needs those very keys. So
    a batch given to :meth:`enqueue` while such a backward is still to come
    is held back and written as soon as the last one has run (a hook on the
    gradient of the reading queries). After a training step (loss, backward)
    the buffers therefore hold the new keys, exactly as before; the keys of
    step t are negatives from step t + 1 on. Keys still held back when the
    next :meth:`read`, :meth:`logits` or :meth:`same_instance_mask` is
    called (a loss computed without a backward) are written first, and
    :meth:`state_dict` saves the queue as it is once they are written, so a
    checkpoint never misses them. Should the buffer be needed by a backward
    after it was written anyway (two losses computed, then one backward),
    autograd raises its "modified by an inplace operation" error rather
    than compute a wrong gradient.

    Precision: the keys are stored in the model's floating dtype but never
    below ``float32``: ``float32`` for a float32 model, under AMP too
    (``bfloat16`` / ``float16`` keys are widened when written), ``float64``
    after ``model.double()``; ``model.half()`` / ``.bfloat16()`` leave the
    queue in ``float32``. :meth:`logits` computes the similarities with
    autocast off in the wider of the query's and the queue's dtype, at
    least ``float32`` (:func:`~mocoplug.models.utils.similarity_dtype`): no
    low-precision copy of the queue, no overflow at ``1 / tau``, and a
    float64 model stays float64 end to end.

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
        # Batches (keys, ids) held back by enqueue() until no pending
        # backward needs the current keys; the number of such backward
        # passes; a counter that retires the hooks of abandoned graphs.
        self._pending: List[Tuple[torch.Tensor, Optional[torch.Tensor]]] = []
        self._readers = 0
        self._generation = 0

    def forward(self) -> torch.Tensor:
        """Return the queued keys, shape (K, C): the buffer itself, no copy.

        Use :meth:`logits` to compute similarities against it; it keeps the
        keys unchanged until the backward pass no longer needs them.
        """
        return self.keys

    def read(self, query: torch.Tensor) -> torch.Tensor:
        """The queued keys (K, C) for a loss of ``query``: the buffer itself
        (:meth:`forward`), no copy.

        Keys given to :meth:`enqueue` afterwards are held back until the
        gradient of ``query`` has been computed: by then every part of the
        backward pass that reads the keys to compute it (e.g. the logits'
        matmul, or :func:`~mocoplug.models.utils.fused_info_nce`) has run.
        Use the keys only in computations that ``query`` enters.

        Args:
            query (torch.Tensor): The queries whose loss reads the keys.

        Returns:
            torch.Tensor: The keys, shape (K, C).
        """
        self.flush()
        if query.requires_grad:
            self._readers += 1
            query.register_hook(self._reader_hook())
        return self()

    def logits(self, query: torch.Tensor) -> torch.Tensor:
        """Similarities of queries with every queued key, ``query @ keys.T``.

        Computed with autocast off in the wider of the query's and the
        queue's dtype, at least ``float32`` (the keys are not copied unless
        the query is wider than them). Until the backward pass through the
        result has run, :meth:`enqueue` holds new keys back instead of
        overwriting the ones that backward needs (see :meth:`read`).

        Args:
            query (torch.Tensor): L2-normalised queries of shape (N, C).

        Returns:
            torch.Tensor: Logits of shape (N, K), before the temperature,
            in float32 or wider.
        """
        keys = self.read(query)
        with torch.autocast(query.device.type, enabled=False):
            dtype = similarity_dtype(query, keys)
            return query.to(dtype) @ keys.to(dtype).t()

    def _reader_hook(self):
        """A hook on the gradient of a reading query: once it is computed,
        that backward no longer needs the keys."""
        generation, fired = self._generation, []

        def hook(grad):
            if fired or generation != self._generation:
                return  # a second backward (retain_graph) or a stale graph
            fired.append(True)
            self._readers -= 1
            if self._readers == 0:
                self._write_pending()

        return hook

    @torch.no_grad()
    def flush(self) -> None:
        """Write the keys still held back (see the class notes) now.

        Called at the start of every step by :meth:`read` (and so
        :meth:`logits`) and :meth:`same_instance_mask`; a backward still to
        come through older logits can then no longer run (autograd says
        so).
        """
        if self._pending:
            self._generation += 1
            self._readers = 0
            self._write_pending()

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
        keys = keys.detach().to(self.keys.dtype)
        if ids is not None:
            ids = ids.to(self.keys.device, torch.long)
        self._pending.append(
            (keys, ids if self.exclude_same_instance else None))
        if self._readers == 0:
            self._write_pending()

    @torch.no_grad()
    def _write_pending(self) -> None:
        """Write the held-back batches into the buffers, in order."""
        pending, self._pending = self._pending, []
        for keys, ids in pending:
            write_ring(self.keys, self.ptr,
                       self.ids if self.exclude_same_instance else None, keys,
                       ids)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """Save the queue as it is once the held-back keys are written,
        without writing them (a backward may still need the buffer)."""
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
        """Loading replaces the queue: keys held back belong to the old one
        and are dropped."""
        self._pending = []
        self._readers = 0
        self._generation += 1
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
        self.flush()
        if ids is None:
            raise ValueError(
                'NegativeKeyQueue: exclude_same_instance=True needs the query '
                'instance ids (the `sample_idx` PackInputs stores)')
        return ids.to(self.ids.device).view(-1, 1) == self.ids.view(1, -1)

    def _apply(self, fn, *args, **kwargs):
        """``.to()``, ``.double()``, ``.half()``... move the buffers as for
        any module, but the keys never drop below ``float32`` (see the
        class notes): converted from their value before the call, not
        rounded through the lower precision."""
        keys = self.keys
        super()._apply(fn, *args, **kwargs)
        if self.keys.dtype != similarity_dtype(self.keys):
            self.keys = keys.to(self.keys.device, torch.float32)
        return self

    def extra_repr(self) -> str:
        return (f'size={self.size}, dim={self.dim}, gather={self.gather}, '
                f'exclude_same_instance={self.exclude_same_instance}')


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
