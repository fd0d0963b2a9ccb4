# Copyright (c) mocoplug contributors. All rights reserved.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from mocoplug.registry import MODELS

SPLITTABLE = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def memory_format(x: torch.Tensor) -> torch.memory_format:
    """The memory format ``x`` is dense in (channels-last or contiguous)."""
    if not x.is_contiguous():
        if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
            return torch.channels_last
        if x.dim() == 5 and x.is_contiguous(
                memory_format=torch.channels_last_3d):
            return torch.channels_last_3d
    return torch.contiguous_format


class _ToMemoryFormat(torch.autograd.Function):
    """A copy of ``x`` in ``layout``, its gradient back in ``x``'s format."""

    @staticmethod
    def forward(ctx, x: torch.Tensor,
                layout: torch.memory_format) -> torch.Tensor:
        ctx.layout = memory_format(x)
        return x.clone(memory_format=layout)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad.contiguous(memory_format=ctx.layout), None


@MODELS.register_module('SplitBN')
class SplitBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics come from ``num_splits`` slices
    (sample ``i`` in slice ``i % num_splits``), the single-GPU Shuffle BN of
    `Momentum Contrast for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ (its authors' CIFAR-10 demo).

    Args:
        num_features (int): Number of channels C.
        num_splits (int): Number of slices.
        **kwargs: Other arguments of :class:`torch.nn.BatchNorm2d`.
    """

    def __init__(self, num_features: int, num_splits: int = 8, **kwargs):
        super().__init__(num_features, **kwargs)
        if num_splits < 1:
            raise ValueError(
                f'SplitBatchNorm: num_splits must be >= 1, got {num_splits}')
        self.num_splits = num_splits

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(
                f'SplitBatchNorm expects (N, C, ...) input, got {x.dim()}-D')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.num_splits == 1:
            return super().forward(x)
        self._check_input_dim(x)
        n, c = x.shape[:2]
        splits = self.num_splits
        if n < splits:
            raise ValueError(
                f'SplitBatchNorm: batch {n} < num_splits {splits}: lower '
                'model.num_splits to a divisor of the per-process batch, or '
                'raise the batch size')
        momentum = 1.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
        if n % splits == 0:
            mean = self.running_mean.repeat(splits)
            var = self.running_var.repeat(splits)
            layout = memory_format(x)
            if layout != torch.contiguous_format:  # no fold without a copy
                x = _ToMemoryFormat.apply(x, torch.contiguous_format)
            out = F.batch_norm(
                x.reshape(n // splits, c * splits, *x.shape[2:]), mean, var,
                self.weight.repeat(splits) if self.affine else None,
                self.bias.repeat(splits) if self.affine else None, True,
                momentum, self.eps).view(x.shape)
            self._store_running(mean.view(splits, c), var.view(splits, c))
            if layout != torch.contiguous_format:
                out = _ToMemoryFormat.apply(out, layout)
            return out
        out, means, vars_ = torch.empty_like(x), [], []
        for g in range(splits):
            mean, var = self.running_mean.clone(), self.running_var.clone()
            out[g::splits] = F.batch_norm(x[g::splits], mean, var, self.weight,
                                          self.bias, True, momentum, self.eps)
            means.append(mean)
            vars_.append(var)
        self._store_running(torch.stack(means), torch.stack(vars_))
        return out

    @torch.no_grad()
    def _store_running(self, means: torch.Tensor, vars_: torch.Tensor):
        if not self.track_running_stats:
            return
        if self.momentum is None:  # as nn.BatchNorm: weight 1 / batches
            weight = self.num_batches_tracked.to(means.dtype).reciprocal()
            self.running_mean.lerp_(means.mean(0), weight)
            self.running_var.lerp_(vars_.mean(0), weight)
        else:
            self.running_mean.copy_(means.mean(0))
            self.running_var.copy_(vars_.mean(0))

    @classmethod
    def convert(cls, module: nn.Module, num_splits: int) -> nn.Module:
        """Replace, in place, every plain BatchNorm{1,2,3}d in ``module`` by a
        split one sharing its tensors; returns ``module`` or the new layer."""
        if type(module) in SPLITTABLE:
            names = ('eps', 'momentum', 'affine', 'track_running_stats')
            new = cls(module.num_features, num_splits,
                      **{k: getattr(module, k)
                         for k in names})
            if module.affine:
                new.weight, new.bias = module.weight, module.bias
            if module.track_running_stats:
                new.running_mean = module.running_mean
                new.running_var = module.running_var
                new.num_batches_tracked = module.num_batches_tracked
            new.train(module.training)
            return new
        for name, child in module.named_children():
            setattr(module, name, cls.convert(child, num_splits))
        return module
