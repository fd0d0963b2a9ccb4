# Copyright (c) mocoplug contributors. All rights reserved.
import pytest
import torch
import torch.nn.functional as F

from mocoplug.models.utils.fused_info_nce import fused_info_nce

# Worst-case round-off (Higham's gamma_n, any summation order or vector
# width) for unit vectors of C channels, M negatives, 1/t <= 100: a logit
# q.n / t is within (C + 2) u / t of the exact one (sum of |q_i n_i| <= 1),
# and the log of a sum of M + 1 positive terms within (M + 2) u of it, so
# the loss is within L(u) = 2 (C + 2) u / t + (M + 3) u: for float64
# (u = 2^-53) and C = 8, M = 50, t = 0.07, L < 4e-14, a relative 1e-14 of
# the losses (>= 3.9). The gradient (1/t)(sum_j p_j n_j - (1 - p_0) k) / N
# is within (M + C + 6) u (2/t) / N < 1.1e-13 per component in absolute
# terms (components near 0 have no relative bound).


def composed(query, key, bank, t, mask=None):
    """The textbook computation: (N, 1 + M) logits, cross-entropy at 0."""
    pos = (query * key).sum(dim=1, keepdim=True)
    neg = query @ bank.t()
    if mask is not None:
        neg = neg.masked_fill(mask, float('-inf'))
    logits = torch.cat((pos, neg), dim=1) / t
    loss = F.cross_entropy(logits, torch.zeros(len(query), dtype=torch.long))
    return loss, neg.max(dim=1).values < pos.squeeze(1)


def embeddings(n, m, c, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)  # the same values anywhere
    query, key, bank = (
        F.normalize(
            torch.randn(s, c, generator=gen, dtype=dtype, device='cpu'),
            dim=1).to(torch.get_default_device()) for s in (n, n, m))
    return query, key, bank


@pytest.mark.parametrize('with_mask', [False, True])
@pytest.mark.parametrize('t', [0.07, 0.2, 1.0])
def test_loss_and_gradient_equal_the_composed_cross_entropy(
        t, with_mask, on_device):
    query, key, bank = embeddings(6, 50, 8)
    # one positive made the winner, so the accuracy is not all misses
    key[2] = query[2]
    mask = None
    if with_mask:
        mask = torch.rand(
            6, 50, generator=torch.Generator().manual_seed(1), device='cpu')
        mask = mask.to(query.device) < 0.3
    q1 = query.clone().requires_grad_()
    q2 = query.clone().requires_grad_()
    loss, hits = fused_info_nce(q1, key, bank, t, mask)
    ref_loss, ref_hits = composed(q2, key, bank, t, mask)
    weight = torch.tensor(1.7, dtype=torch.float64)
    (loss * weight).backward()
    (ref_loss * weight).backward()
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=0)
    torch.testing.assert_close(q1.grad, q2.grad, rtol=1e-10, atol=1e-12)
    # the hits are discrete: equal because no negative is within round-off
    # (1e-14) of its positive, which this asserts
    neg = query @ bank.t()
    if mask is not None:
        neg = neg.masked_fill(mask, float('-inf'))
    pos = (query * key).sum(1)
    assert ((neg.amax(1) - pos).abs() > 1e-9).all()
    assert torch.equal(hits, ref_hits) and hits[2]
    assert not hits.requires_grad


def test_gradcheck(on_device):
    query, key, bank = embeddings(3, 7, 4)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[0, 2] = mask[2, 6] = True
    query.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda q: fused_info_nce(q, key, bank, 0.2, mask)[0], (query, ))


def test_fully_masked_row_leaves_only_the_positive(on_device):
    query, key, bank = embeddings(2, 5, 3)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1] = True
    loss, hits = fused_info_nce(query, key, bank, 0.2, mask)
    ref, _ = composed(query[:1], key[:1], bank, 0.2)
    # row 1: -log(exp(p) / exp(p)) = 0 exactly (exp(0) = 1, log(1) = 0), so
    # the mean is half of row 0's loss; row 0 as above (L < 1e-14)
    torch.testing.assert_close(loss, ref / 2, rtol=1e-12, atol=0)
    assert hits[1]


def test_float32_matches_float64_and_large_inverse_temperature_is_finite(
        on_device):
    query, key, bank = embeddings(8, 4096, 16)
    for t in (0.2, 0.01):
        ref, _ = composed(query, key, bank, t)
        loss, _ = fused_info_nce(query.float(), key.float(), bank.float(), t)
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        # L(2^-24) above (C = 16, M = 4096) plus the rounding of q and n to
        # float32 (4 u / t more): 4.8e-4 at t = 0.01 (loss 79), 2.6e-4 at
        # t = 0.2 (loss 9.1), within atol + rtol |loss| (7.9e-3, 9.2e-4)
        u = 2.0**-24
        bound = ((2 * 16 + 8) / t + 4096 + 3) * u
        assert bound < 1e-5 + 1e-4 * ref.abs()
        torch.testing.assert_close(loss.double(), ref, rtol=1e-4, atol=1e-5)


def test_float32_under_bf16_autocast_and_gradient_in_the_query_dtype():
    query, key, bank = embeddings(4, 32, 8, dtype=torch.float32)
    q = query.bfloat16().requires_grad_()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        loss, _ = fused_info_nce(q, key, bank, 0.2)
    assert loss.dtype == torch.float32
    ref, _ = composed(q.detach().float(), key, bank, 0.2)
    # the same bfloat16 queries, then float32 on both sides: each is within
    # L(2^-24) = (2 (8 + 2) / 0.2 + 35) u = 8e-6 of the exact loss (C = 8,
    # M = 32, see the top), so they differ by < 1.6e-5 < 1e-5 + 1e-5 |loss|
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    loss.backward()
    assert q.grad.dtype == torch.bfloat16


def test_never_computed_below_the_widest_input():
    """A float64 bank (the queue of a float64 model) is not narrowed to a
    float32 query's dtype: the loss is computed in float64, the gradient
    comes back in the query's dtype."""
    query, key, bank = embeddings(4, 32, 8)
    q = query.float().requires_grad_()
    loss, _ = fused_info_nce(q, key, bank, 0.2)
    assert loss.dtype == torch.float64
    q64 = q.detach().double().requires_grad_()
    ref, _ = composed(q64, key, bank, 0.2)
    # Both in float64, rounded in another order: each logit (<= 1/t = 5)
    # carries a few roundings of 1.1e-16 relative, the log-sum-exp over 33
    # terms at most 33 more; far below 1e-13 on any CPU.
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-13)
    loss.backward()
    ref.backward()
    assert q.grad.dtype == torch.float32
    # two float64 gradients ~1e-16 apart round to float32 values at most
    # one float32 rounding (2^-23 relative) apart
    torch.testing.assert_close(q.grad, q64.grad.float(), rtol=2**-23, atol=0)


def test_the_bank_is_read_not_copied_and_inplace_changes_are_caught(on_device):
    query, key, bank = embeddings(2, 6, 3, dtype=torch.float32)
    query.requires_grad_()
    loss, _ = fused_info_nce(query, key, bank, 0.2)
    bank[0] = 0  # as if the queue were written before the backward
    with pytest.raises(RuntimeError, match='inplace'):
        loss.backward()


def test_keys_that_need_gradients_are_refused(on_device):
    query, key, bank = embeddings(2, 6, 3, dtype=torch.float32)
    with pytest.raises(ValueError, match='InfoNCEHead.loss'):
        fused_info_nce(query, key.requires_grad_(), bank, 0.2)
