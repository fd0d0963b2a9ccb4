# Copyright (c) mocoplug contributors. All rights reserved.
import pytest
import torch
import torch.nn.functional as F

from mocoplug.models.utils.fused_info_nce import fused_info_nce


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
    torch.testing.assert_close(q1.grad, q2.grad, rtol=1e-10, atol=1e-14)
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
    # row 1: -log(exp(p) / exp(p)) = 0, so the mean is half of row 0's loss
    torch.testing.assert_close(loss, ref / 2, rtol=1e-12, atol=0)
    assert hits[1]


def test_float32_matches_float64_and_large_inverse_temperature_is_finite(
        on_device):
    query, key, bank = embeddings(8, 4096, 16)
    for t in (0.2, 0.01):
        ref, _ = composed(query, key, bank, t)
        loss, _ = fused_info_nce(query.float(), key.float(), bank.float(), t)
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)


def test_float32_under_bf16_autocast_and_gradient_in_the_query_dtype():
    query, key, bank = embeddings(4, 32, 8, dtype=torch.float32)
    q = query.bfloat16().requires_grad_()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        loss, _ = fused_info_nce(q, key, bank, 0.2)
    assert loss.dtype == torch.float32
    ref, _ = composed(q.detach().float(), key, bank, 0.2)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)
    loss.backward()
    assert q.grad.dtype == torch.bfloat16


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
