# Copyright (c) mocoplug contributors. All rights reserved.
"""Measures of a contrastive embedding's health, for
:class:`~mocoplug.engine.hooks.RepresentationHealthHook`.

Alignment and uniformity follow `Understanding Contrastive Representation
Learning through Alignment and Uniformity on the Hypersphere
<https://arxiv.org/abs/2005.10242>`_ (Wang & Isola, ICML 2020); the
per-dimension standard deviation of the L2-normalised embeddings is the
collapse indicator of SimSiam (`Chen & He, CVPR 2021
<https://arxiv.org/abs/2011.10566>`_, Sec. 4.1). All functions return
0-dim tensors on the input's device (no host sync).
"""
from typing import Sequence

import torch
import torch.nn.functional as F


def embedding_std(x: torch.Tensor) -> torch.Tensor:
    """Std over the batch of each dimension of the L2-normalised embeddings,
    averaged over dimensions.

    About ``1 / sqrt(d)`` when the embeddings spread over the sphere of
    ``R^d``; 0 when every sample maps to one vector (collapse).

    Args:
        x (torch.Tensor): Embeddings (N, d), N >= 2; normalised here.
    """
    return F.normalize(x.float(), dim=1).std(dim=0).mean()


def alignment(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Wang & Isola's alignment with alpha = 2: ``E ||x - y||^2`` over the
    positive pairs (rows of x and y), both L2-normalised.

    In [0, 4]; 0 when every query equals its key. Equals ``2 - 2 E cos``.
    """
    x, y = F.normalize(x.float(), dim=1), F.normalize(y.float(), dim=1)
    return (x - y).pow(2).sum(dim=1).mean()


def uniformity(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """Wang & Isola's uniformity: ``log E exp(-t ||x_i - x_j||^2)`` over the
    pairs i < j of the batch, L2-normalised, t = 2 by default.

    0 at collapse, lower is more uniform. Points spread uniformly over a
    high-dimensional sphere are nearly orthogonal, ``||x_i - x_j||^2 ~ 2``,
    which gives about ``-2t`` (-4); Wang & Isola's well-trained 128-d
    encoders reach about -3.8. (The floor, ``-4t``, needs antipodal
    pairs only.)

    Args:
        x (torch.Tensor): Embeddings (N, d), N >= 2; normalised here.
        t (float): The kernel's scale. Defaults to 2.
    """
    x = F.normalize(x.float(), dim=1)
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log()


def relative_parameter_distance(
        online: Sequence[torch.Tensor],
        target: Sequence[torch.Tensor]) -> torch.Tensor:
    """``||theta_target - theta_online|| / ||theta_online||`` over all the
    given tensors taken as one vector (fused ``torch._foreach`` ops).

    Args:
        online (Sequence[torch.Tensor]): The query encoder's parameters.
        target (Sequence[torch.Tensor]): The key encoder's, same shapes.
    """
    online, target = list(online), list(target)
    if len(online) != len(target) or not online:
        raise ValueError('relative_parameter_distance: expected two equally '
                         f'long, non-empty lists, got {len(online)} and '
                         f'{len(target)} tensors')
    with torch.no_grad():
        diff = torch.linalg.vector_norm(
            torch.stack(
                torch._foreach_norm(torch._foreach_sub(target, online))))
        norm = torch.linalg.vector_norm(
            torch.stack(torch._foreach_norm(online)))
    return diff / norm.clamp_min(1e-12)
