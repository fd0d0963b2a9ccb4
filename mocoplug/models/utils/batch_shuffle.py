# Copyright (c) mocoplug contributors. All rights reserved.
"""Shuffle BN across processes (`MoCo <https://arxiv.org/abs/1911.05722>`_,
Sec. 3.3) with no host synchronisation: the permutation is drawn, shared and
applied on the images' device."""
from typing import List, Tuple

import torch
import torch.distributed as dist


def _gather(x: torch.Tensor) -> torch.Tensor:
    """The batches of every process, concatenated in rank order, on ``x``'s
    device (every process must hold a batch of the same shape: see
    :class:`~mocoplug.engine.hooks.MoCoConfigCheckHook`)."""
    parts: List[torch.Tensor] = [
        torch.empty_like(x) for _ in range(dist.get_world_size())
    ]
    dist.all_gather(parts, x)
    return torch.cat(parts)


@torch.no_grad()
def batch_shuffle_ddp(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Gather the batches of all processes, permute the global batch with a
    permutation shared by all of them, and return this process's slice.

    The permutation is drawn by rank 0 on ``x``'s device with that device's
    default generator (what mmengine's ``randomness.seed`` seeds and exact
    resume saves) and broadcast on the device; nothing is copied to or
    from the host, so on a GPU the host never waits for the device here.
    On CPU it is the very draw of mmpretrain's ``batch_shuffle_ddp``
    (``torch.randperm`` of the global batch size by rank 0), so the keys are
    the same.

    Args:
        x (torch.Tensor): This process's batch (N, ...).

    Returns:
        Tuple[torch.Tensor, torch.Tensor]: The N images this process
        encodes, and the permutation of the global batch (W * N,), which
        :func:`batch_unshuffle_ddp` needs to give every image back.
    """
    x_all = _gather(x)
    if dist.get_rank() == 0:
        perm = torch.randperm(x_all.shape[0], device=x.device)
    else:
        perm = torch.empty(x_all.shape[0], dtype=torch.long, device=x.device)
    dist.broadcast(perm, src=0)
    return x_all[perm.view(dist.get_world_size(), -1)[dist.get_rank()]], perm


@torch.no_grad()
def batch_unshuffle_ddp(y: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """Undo :func:`batch_shuffle_ddp`: gather the encoded slices of all
    processes and return the rows of this process's own images, in the
    order of its input batch.

    Args:
        y (torch.Tensor): This process's encoded slice (N, ...).
        perm (torch.Tensor): The permutation :func:`batch_shuffle_ddp`
            returned.

    Returns:
        torch.Tensor: (N, ...), row i belongs to input image i.
    """
    # row j of the gathered output encodes global image perm[j]
    unshuffle = torch.argsort(perm)
    rows = unshuffle.view(dist.get_world_size(), -1)[dist.get_rank()]
    return _gather(y)[rows]
