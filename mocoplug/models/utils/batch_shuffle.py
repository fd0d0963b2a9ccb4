# Copyright (c) mocoplug contributors. All rights reserved.
"""Shuffle BN across processes (`MoCo <https://arxiv.org/abs/1911.05722>`_,
Sec. 3.3), all on the images' device: no host synchronisation."""
from typing import Tuple

import torch
import torch.distributed as dist


def _gather(x: torch.Tensor) -> torch.Tensor:
    """The (equal-shaped) batches of every process, in rank order."""
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x)
    return torch.cat(parts)


@torch.no_grad()
def batch_shuffle_ddp(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Gather all processes' batches, permute the global batch by a permutation
    rank 0 draws with the device's default generator, and return this process's
    N images and the permutation (W * N,) for :func:`batch_unshuffle_ddp`."""
    x_all = _gather(x)
    if dist.get_rank() == 0:
        perm = torch.randperm(x_all.shape[0], device=x.device)
    else:
        perm = torch.empty(x_all.shape[0], dtype=torch.long, device=x.device)
    dist.broadcast(perm, src=0)
    return x_all[perm.view(dist.get_world_size(), -1)[dist.get_rank()]], perm


@torch.no_grad()
def batch_unshuffle_ddp(y: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """Undo :func:`batch_shuffle_ddp` on the encoded slice ``y`` (N, ...)."""
    rows = torch.argsort(perm).view(dist.get_world_size(), -1)[dist.get_rank()]
    return _gather(y)[rows]
