# Copyright (c) mocoplug contributors. All rights reserved.
"""Health of a contrastive embedding: `Wang & Isola, ICML 2020
<https://arxiv.org/abs/2005.10242>`_ and SimSiam's collapse indicator
(`Chen & He, CVPR 2021 <https://arxiv.org/abs/2011.10566>`_, Sec. 4.1)."""
from typing import Sequence

import torch
import torch.nn.functional as F


def embedding_std(x: torch.Tensor) -> torch.Tensor:
    """Std over the batch of each dimension of the L2-normalised embeddings
    (N, d), averaged: about ``1 / sqrt(d)`` when spread, 0 at collapse."""
    return F.normalize(x.float(), dim=1).std(dim=0).mean()


def alignment(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Wang & Isola's alignment with alpha = 2: ``E ||x - y||^2`` over the
    positive pairs (rows), L2-normalised; in [0, 4]."""
    x, y = F.normalize(x.float(), dim=1), F.normalize(y.float(), dim=1)
    return (x - y).pow(2).sum(dim=1).mean()


def uniformity(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """Wang & Isola's uniformity, ``log E exp(-t ||x_i - x_j||^2)`` over the
    pairs i < j of the L2-normalised batch; 0 at collapse."""
    x = F.normalize(x.float(), dim=1)
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log()


def relative_parameter_distance(
        online: Sequence[torch.Tensor],
        target: Sequence[torch.Tensor]) -> torch.Tensor:
    """``||theta_target - theta_online|| / ||theta_online||``, the
    encoders' tensors taken as one vector."""
    online, target = list(online), list(target)
    if len(online) != len(target) or not online:
        raise ValueError('relative_parameter_distance: expected two equally '
                         f'long, non-empty lists, got {len(online)} and '
                         f'{len(target)} tensors')
    with torch.no_grad():
        diff, norm = (
            torch.linalg.vector_norm(torch.stack(torch._foreach_norm(t)))
            for t in (torch._foreach_sub(target, online), online))
    return diff / norm.clamp_min(1e-12)
