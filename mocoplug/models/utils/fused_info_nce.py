# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Optional, Tuple

import torch

from .precision import similarity_dtype


class _InfoNCEAgainstBank(torch.autograd.Function):
    """InfoNCE of queries against their positive keys and a bank of negative
    keys, forward and backward written out so that the (N, M) similarity
    matrix is materialised once and never copied.

    The composed version (``cat([pos, q @ bank.T]) / t`` then
    ``cross_entropy``) writes the (N, 1 + M) logits three times in the
    forward pass (matmul, concatenation, division), reads and writes them
    again in log-softmax and three more times in the backward pass; with
    MoCo's M = 65536 that is most of the cost of the loss. Here the forward
    pass turns the matmul output into exp(logit - row max) in place, and the
    backward pass folds the softmax normalisation into the gradient's
    matmul: ``d loss / d q = diag(g / Z) (E @ bank) + ...``, so E is read
    once and nothing of size (N, M) is written.
    """

    @staticmethod
    def forward(ctx, query: torch.Tensor, key: torch.Tensor,
                bank: torch.Tensor, inv_tau: float,
                neg_mask: Optional[torch.Tensor]):
        with torch.autocast(query.device.type, enabled=False):
            # at least float32, never lower than any input: a float32 queue
            # is read as it is (no copy), a float64 model stays float64
            dtype = similarity_dtype(query, key, bank)
            bank = bank.to(dtype)
            key = key.to(dtype)
            scaled = query.to(dtype) * inv_tau
            neg = scaled @ bank.t()  # (N, M): the only buffer of that size
            if neg_mask is not None:
                neg.masked_fill_(neg_mask, float('-inf'))
            pos = (scaled * key).sum(dim=1)
            neg_max = neg.amax(dim=1)
            # The positive wins when no negative scores higher; a tie counts
            # as a miss, as in the usual top-1 on logits.
            hits = neg_max < pos
            shift = torch.maximum(neg_max, pos)
            weights = neg.sub_(shift[:, None]).exp_()  # exp(logit - shift)
            pos_weight = (pos - shift).exp()
            total = weights.sum(dim=1) + pos_weight
            loss = (shift + total.log() - pos).mean()
        ctx.save_for_backward(weights, pos_weight, total, key, bank)
        ctx.inv_tau = inv_tau
        ctx.query_dtype = query.dtype
        ctx.mark_non_differentiable(hits)
        return loss, hits

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_hits: torch.Tensor):
        weights, pos_weight, total, key, bank = ctx.saved_tensors
        with torch.autocast(weights.device.type, enabled=False):
            # d loss_i / d logit_ij = softmax_ij; mean over the N queries
            row = grad_loss / (weights.shape[0] * total)
            grad_scaled = (weights @ bank) * row[:, None]
            grad_scaled += (pos_weight * row -
                            grad_loss / weights.shape[0])[:, None] * key
            grad_query = (grad_scaled * ctx.inv_tau).to(ctx.query_dtype)
        return grad_query, None, None, None, None


def fused_info_nce(
    query: torch.Tensor,
    key: torch.Tensor,
    bank: torch.Tensor,
    temperature: float,
    neg_mask: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The InfoNCE loss of `Momentum Contrast for Unsupervised Visual
    Representation Learning <https://arxiv.org/abs/1911.05722>`_, eq. (1)::

        L = mean_i -log exp(q_i.k_i / t) / (exp(q_i.k_i / t)
                                            + sum_j exp(q_i.n_j / t))

    equal (to float round-off) to the cross-entropy of the logits
    ``[q.k+, q.n_1 .. q.n_M] / t`` with the positive at index 0, computed
    without the (N, 1 + M) logits tensor and its copies (see
    :class:`_InfoNCEAgainstBank`). Computed with autocast off in the widest
    dtype of the inputs and float32 (bfloat16 / float16 queries against a
    float32 queue: float32; a float64 model: float64), see
    :func:`~mocoplug.models.utils.similarity_dtype`. Gradients flow to
    ``query`` only: the keys and the bank come from the momentum encoder.

    Args:
        query (torch.Tensor): Queries (N, C), L2-normalised.
        key (torch.Tensor): Their positive keys (N, C), no gradient.
        bank (torch.Tensor): Negative keys (M, C), e.g. MoCo's queue, no
            gradient.
        temperature (float): Temperature t.
        neg_mask (torch.Tensor, optional): Bool (N, M), True for the
            negatives to leave out of query i's denominator.

    Returns:
        Tuple[torch.Tensor, torch.Tensor]: The mean loss (a scalar) and, per
        query, whether its positive scored above every negative (bool, N).
    """
    if key.requires_grad or bank.requires_grad:
        raise ValueError(
            'fused_info_nce: the keys and the negative bank must not '
            'require gradients (they come from the momentum encoder); use '
            'InfoNCEHead.loss(pos, neg) to backpropagate into them.')
    return _InfoNCEAgainstBank.apply(query, key, bank, 1.0 / temperature,
                                     neg_mask)
