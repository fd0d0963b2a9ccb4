# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Optional, Tuple

import torch
from torch import Tensor

from .precision import similarity_dtype


class _InfoNCEAgainstBank(torch.autograd.Function):
    """InfoNCE against a bank of negatives, the (N, M) similarities written
    once, never copied (docs/design_notes.md, "The fused loss")."""

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, bank: Tensor, inv_tau: float,
                neg_mask: Optional[Tensor]):
        with torch.autocast(query.device.type, enabled=False):
            dtype = similarity_dtype(query, key, bank)
            bank, key = bank.to(dtype), key.to(dtype)
            scaled = query.to(dtype) * inv_tau
            neg = scaled @ bank.t()  # (N, M): the only buffer of that size
            if neg_mask is not None:
                neg.masked_fill_(neg_mask, float('-inf'))
            pos = (scaled * key).sum(dim=1)
            neg_max = neg.amax(dim=1)
            hits = neg_max < pos
            shift = torch.maximum(neg_max, pos)
            weights = neg.sub_(shift[:, None]).exp_()  # exp(logit - shift)
            pos_weight = (pos - shift).exp()
            total = weights.sum(dim=1) + pos_weight
            loss = (shift + total.log() - pos).mean()
        ctx.save_for_backward(weights, pos_weight, total, key, bank)
        ctx.inv_tau, ctx.query_dtype = inv_tau, query.dtype
        ctx.mark_non_differentiable(hits)
        return loss, hits

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_hits: Tensor):
        weights, pos_weight, total, key, bank = ctx.saved_tensors
        with torch.autocast(weights.device.type, enabled=False):
            row = grad_loss / (weights.shape[0] * total)
            grad_scaled = (weights @ bank) * row[:, None]
            grad_scaled += (pos_weight * row -
                            grad_loss / weights.shape[0])[:, None] * key
            grad_query = (grad_scaled * ctx.inv_tau).to(ctx.query_dtype)
        return grad_query, None, None, None, None


def fused_info_nce(query: Tensor,
                   key: Tensor,
                   bank: Tensor,
                   temperature: float,
                   neg_mask: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The InfoNCE loss of `Momentum Contrast for Unsupervised Visual
    Representation Learning <https://arxiv.org/abs/1911.05722>`_, eq. (1),
    of L2-normalised queries, keys (N, C) and ``bank`` (M, C) less the
    ``neg_mask`` (N, M), without the (N, 1 + M) logits; gradients to
    ``query`` only. Returns the mean loss and per-query hits."""
    if key.requires_grad or bank.requires_grad:
        raise ValueError('fused_info_nce: keys and bank must not require '
                         'grad; use InfoNCEHead.loss(pos, neg) for that')
    return _InfoNCEAgainstBank.apply(query, key, bank, 1.0 / temperature,
                                     neg_mask)
