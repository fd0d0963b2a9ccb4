# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCo v1/v2/v3 training steps in plain PyTorch, written from the papers'
pseudocode, as the reference the float64 tests hold mocoplug's classes to.

- MoCo v1 (He et al., https://arxiv.org/abs/1911.05722), Algorithm 1:
  q = f_q(x_q), k = f_k(x_k) (no gradient), logits [q.k+, q.queue] / t,
  cross-entropy at index 0, SGD on f_q, then f_k = m f_k + (1 - m) f_q and
  enqueue k / dequeue the oldest keys; Shuffle BN (Sec. 3.3) across GPUs.
  The queue is kept as the official code keeps it: K slots written at a
  pointer, K a multiple of the global batch.
- MoCo v2 (Chen et al., https://arxiv.org/abs/2003.04297): the same with
  an MLP head (fc-ReLU-fc) and t = 0.2.
- MoCo v3 (Chen, Xie, He, https://arxiv.org/abs/2104.02057), Algorithm 1:
  q1, q2 = g_q(f_q(x1)), g_q(f_q(x2)); k1, k2 = f_k(x1), f_k(x2);
  loss = ctr(q1, k2) + ctr(q2, k1), ctr(q, k) = 2 tau CE(q k^T / tau,
  labels) with the keys of all GPUs (labels = arange(N) + N * rank), and
  the momentum m following a cosine from m_0 to 1.

Nothing here comes from mocoplug: networks are torch.nn modules, Shuffle
BN talks to torch.distributed directly, split BN is its formula.
"""
import copy
import math
from typing import Iterable, List

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def conv_layers(channels=(8, 16)) -> List[nn.Module]:
    """3x3 conv (no bias) - BN - ReLU per width, a 2x2 max-pool after the
    first: the architecture of the test's ``SmallConvNet``."""
    layers, c_in = [], 3
    for i, c_out in enumerate(channels):
        layers += [
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU()
        ]
        if i == 0:
            layers.append(nn.MaxPool2d(2))
        c_in = c_out
    return layers


def mlp(dims: Iterable[int], bn: bool, last_bn: bool,
        bias: bool) -> List[nn.Module]:
    """Linear layers between ``dims``, ReLU between them (after a BN when
    ``bn``), an affine-free BN after the last one when ``last_bn``."""
    dims = list(dims)
    layers: List[nn.Module] = []
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(d_in, d_out, bias=bias))
        if i < len(dims) - 2:
            if bn:
                layers.append(nn.BatchNorm1d(d_out))
            layers.append(nn.ReLU())
        elif last_bn:
            layers.append(nn.BatchNorm1d(d_out, affine=False))
    return layers


def pooled(layers: List[nn.Module]) -> List[nn.Module]:
    """Global average pooling of the last feature map, flattened."""
    return layers + [nn.AdaptiveAvgPool2d(1), nn.Flatten()]


class SplitBN(nn.Module):
    """BatchNorm whose training statistics come from ``splits`` slices of
    the batch, slice g holding samples g, g + splits, ... (the MoCo
    authors' single-GPU emulation of Shuffle BN), from its formula:
    y = (x - mean_g) / sqrt(var_g + eps) * w + b, the running statistics
    moved towards the mean over the slices of mean_g and of the unbiased
    var_g."""

    def __init__(self, bn: nn.BatchNorm2d, splits: int):
        super().__init__()
        self.bn, self.splits = bn, splits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn, s = self.bn, self.splits
        if not self.training:
            return bn(x)
        shape = (1, -1, 1, 1)
        outs, means, variances = [], [], []
        for g in range(s):
            part = x[g::s]
            mean = part.mean(dim=(0, 2, 3))
            var = part.var(dim=(0, 2, 3), unbiased=False)
            count = part.numel() // part.shape[1]
            outs.append((part - mean.view(shape)) /
                        torch.sqrt(var.view(shape) + bn.eps) *
                        bn.weight.view(shape) + bn.bias.view(shape))
            means.append(mean.detach())
            variances.append(var.detach() * count / (count - 1))
        with torch.no_grad():
            m = bn.momentum
            bn.running_mean.mul_(1 - m).add_(m * torch.stack(means).mean(0))
            bn.running_var.mul_(1 - m).add_(m * torch.stack(variances).mean(0))
            bn.num_batches_tracked.add_(1)
        # sample j * s + g is row j of slice g
        return torch.stack(outs, dim=1).view_as(x)


def split_bn(module: nn.Module, splits: int) -> nn.Module:
    """Replace every BatchNorm2d of ``module`` by a :class:`SplitBN`
    around it (same parameters and buffers, same state-dict order)."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            setattr(module, name, SplitBN(child, splits))
        else:
            split_bn(child, splits)
    return module


def gather(x: torch.Tensor) -> torch.Tensor:
    """The tensors of all ranks, concatenated in rank order."""
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def average_gradients(params: Iterable[nn.Parameter]) -> None:
    """What DistributedDataParallel does in the backward pass."""
    for p in params:
        dist.all_reduce(p.grad)
        p.grad.div_(dist.get_world_size())


def momentum_update(f_k: nn.Module, f_q: nn.Module, m: float) -> None:
    """f_k = m f_k + (1 - m) f_q, parameters only (buffers are f_k's)."""
    with torch.no_grad():
        for p_k, p_q in zip(f_k.parameters(), f_q.parameters()):
            p_k.mul_(m).add_(p_q, alpha=1 - m)


class MoCoReference:
    """MoCo v1/v2 (Algorithm 1 of the MoCo paper).

    Args:
        f_q (nn.Module): The query encoder (backbone, pooling, head).
        queue (torch.Tensor): The initial keys (K, C), L2-normalised.
        t (float): Temperature.
        m (float): Momentum.
        shuffle (str): ``'ddp'`` (Shuffle BN across ranks) or ``'split'``
            (one process; ``f_q``'s BN layers already :class:`SplitBN`).
        lr (float): SGD learning rate (momentum 0.9, weight decay 1e-4).
    """

    def __init__(self, f_q: nn.Module, queue: torch.Tensor, t: float, m: float,
                 shuffle: str, lr: float):
        self.f_q = f_q
        self.f_k = copy.deepcopy(f_q)  # initialised as f_q
        for p in self.f_k.parameters():
            p.requires_grad_(False)
        self.queue = queue.clone()
        self.ptr = 0
        self.t, self.m, self.shuffle = t, m, shuffle
        self.opt = torch.optim.SGD(
            f_q.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)

    @torch.no_grad()
    def keys(self, x_k: torch.Tensor) -> torch.Tensor:
        """k = f_k(x_k) under Shuffle BN, in the order of x_k."""
        if self.shuffle == 'split':
            perm = torch.randperm(x_k.shape[0])
            k = torch.empty(x_k.shape[0], self.queue.shape[1], dtype=x_k.dtype)
            k[perm] = F.normalize(self.f_k(x_k[perm]), dim=1)
            return k
        # Shuffle BN: the global key batch, permuted by rank 0's draw, each
        # rank encodes its share, then every key goes back to its image.
        world, rank = dist.get_world_size(), dist.get_rank()
        x_all = gather(x_k)
        perm = torch.randperm(x_all.shape[0]) if rank == 0 else \
            torch.empty(x_all.shape[0], dtype=torch.long)
        dist.broadcast(perm, src=0)
        mine = perm.view(world, -1)[rank]
        k_shuffled = gather(F.normalize(self.f_k(x_all[mine]), dim=1))
        k_all = torch.empty_like(k_shuffled)
        k_all[perm] = k_shuffled  # row j encodes image perm[j]
        return k_all.view(world, -1, k_all.shape[1])[rank]

    def step(self, x_q: torch.Tensor, x_k: torch.Tensor) -> torch.Tensor:
        """One training iteration; returns this rank's loss."""
        q = F.normalize(self.f_q(x_q), dim=1)  # N x C
        k = self.keys(x_k)  # N x C, no gradient
        l_pos = torch.bmm(q.unsqueeze(1), k.unsqueeze(2)).view(-1, 1)
        l_neg = torch.mm(q, self.queue.t())  # N x K
        logits = torch.cat([l_pos, l_neg], dim=1)
        labels = torch.zeros(q.shape[0], dtype=torch.long)
        loss = F.cross_entropy(logits / self.t, labels)
        self.opt.zero_grad()
        loss.backward()
        if self.shuffle == 'ddp':
            average_gradients(self.f_q.parameters())
        self.opt.step()
        momentum_update(self.f_k, self.f_q, self.m)
        # enqueue the global batch's keys, dequeue the oldest
        k_all = gather(k) if self.shuffle == 'ddp' else k
        self.queue[self.ptr:self.ptr + k_all.shape[0]] = k_all
        self.ptr = (self.ptr + k_all.shape[0]) % self.queue.shape[0]
        return loss.detach()


class MoCoV3Reference:
    """MoCo v3 (Algorithm 1 of the MoCo v3 paper) on the ranks of the
    default process group, with the official cosine momentum schedule
    m_t = 1 - (1 - m_0) (cos(pi t / T) + 1) / 2.

    Args:
        backbone, projector, predictor (nn.Module): f_q = projector after
            backbone; the query branch ends with the predictor.
        tau (float): Temperature.
        m (float): m_0.
        max_iters (int): T.
        lr (float): SGD learning rate (momentum 0.9, weight decay 1e-4).
    """

    def __init__(self, backbone: nn.Module, projector: nn.Module,
                 predictor: nn.Module, tau: float, m: float, max_iters: int,
                 lr: float):
        self.f_q = nn.Sequential(backbone, projector)
        self.g_q = predictor
        self.f_k = copy.deepcopy(self.f_q)
        for p in self.f_k.parameters():
            p.requires_grad_(False)
        self.tau, self.m0, self.max_iters = tau, m, max_iters
        self.params = list(self.f_q.parameters()) + list(
            predictor.parameters())
        self.opt = torch.optim.SGD(
            self.params, lr=lr, momentum=0.9, weight_decay=1e-4)
        self.iter = 0

    def ctr(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q, k = F.normalize(q, dim=1), F.normalize(k, dim=1)
        k = gather(k)  # the keys of every GPU
        logits = torch.mm(q, k.t()) / self.tau
        n = q.shape[0]
        labels = torch.arange(n) + n * dist.get_rank()
        return 2 * self.tau * F.cross_entropy(logits, labels)

    def step(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """One training iteration; returns this rank's loss."""
        q1, q2 = self.g_q(self.f_q(x1)), self.g_q(self.f_q(x2))
        with torch.no_grad():
            k1, k2 = self.f_k(x1), self.f_k(x2)
        loss = self.ctr(q1, k2) + self.ctr(q2, k1)
        self.opt.zero_grad()
        loss.backward()
        average_gradients(self.params)
        self.opt.step()
        # The official code moves f_k at the start of iteration t with m_t;
        # that is right after this step, with t = the next iteration.
        self.iter += 1
        cos = (math.cos(math.pi * self.iter / self.max_iters) + 1) / 2
        momentum_update(self.f_k, self.f_q, 1 - (1 - self.m0) * cos)
        return loss.detach()
