# Copyright (c) mocoplug contributors. All rights reserved.
import math

import pytest
import torch
from mmpretrain.models.heads import ContrastiveHead

from mocoplug.models import InfoNCEHead

# Round-off bound used below (worst case, any summation order): with
# logits l = s / t, the head's float32 loss is within |l|max u (the
# division) + (K + 3) u (log-sum-exp of K + 1 positive terms) of the exact
# one per row, u = 2^-24; the float64 sides of a comparison add nothing
# measurable (2^-29 of that).


def hand_info_nce(pos, neg, t):
    """-log(exp(pos/t) / (exp(pos/t) + sum exp(neg/t))), averaged."""
    losses = []
    for p, row in zip(pos.tolist(), neg.tolist()):
        num = math.exp(p[0] / t)
        den = num + sum(math.exp(v / t) for v in row)
        losses.append(-math.log(num / den))
    return sum(losses) / len(losses)


def test_loss_equals_a_hand_computation():
    torch.manual_seed(0)
    pos, neg = torch.rand(4, 1) * 2 - 1, torch.rand(4, 6) * 2 - 1
    out = InfoNCEHead(temperature=0.2).loss(pos, neg)
    # |l| <= 5, K = 6: within 14 u = 8e-7 of the exact loss (5.4 here)
    assert out['loss'].item() == pytest.approx(
        hand_info_nce(pos, neg, 0.2), rel=1e-5)


def test_loss_equals_mmpretrain_contrastive_head():
    torch.manual_seed(1)
    pos, neg = torch.randn(8, 1), torch.randn(8, 100)
    ours = InfoNCEHead(temperature=0.07).loss(pos, neg)['loss']
    ref = ContrastiveHead(
        loss=dict(type='CrossEntropyLoss'),
        temperature=0.07).loss(pos.clone(), neg.clone())
    # |l| <= 49, K = 100: each within 152 u = 9e-6 of the exact loss (37
    # here): they differ by < 5e-7 |loss|
    assert torch.allclose(ours, ref, rtol=1e-5, atol=0)


def test_random_guessing_gives_log_k_plus_one():
    pos, neg = torch.zeros(3, 1), torch.zeros(3, 4095)
    out = InfoNCEHead(temperature=0.2).loss(pos, neg)
    # exact up to the last log: exp(0) = 1 and integer sums below 2^24 are
    # exact in any order; float32 log is within 2 u of log(4096)
    assert out['loss'].item() == pytest.approx(math.log(4096), rel=1e-6)


def test_contrastive_accuracy_counts_positives_above_every_negative():
    pos = torch.tensor([[0.9], [0.1], [0.5], [0.2]])
    neg = torch.tensor([[0.1, 0.2], [0.3, 0.0], [0.4, 0.6], [-1., 0.1]])
    out = InfoNCEHead().loss(pos, neg)
    assert out['contrast_acc'].item() == pytest.approx(50.0)
    assert not out['contrast_acc'].requires_grad


def test_masked_negatives_leave_the_loss_and_the_accuracy():
    pos = torch.tensor([[0.5], [0.2]])
    neg = torch.tensor([[0.9, 0.1, 0.3], [0.0, 0.8, 0.1]])
    mask = torch.tensor([[True, False, False], [False, True, False]])
    head = InfoNCEHead(temperature=0.1)
    out = head.loss(pos, neg, mask)
    kept = torch.tensor([[0.1, 0.3], [0.0, 0.1]])
    # |l| <= 9, K = 2: within 14 u = 8e-7 of the exact loss (0.28 here:
    # relative 3e-6)
    assert out['loss'].item() == pytest.approx(
        hand_info_nce(pos, kept, 0.1), rel=1e-5)
    assert out['contrast_acc'].item() == 100.0


def test_loss_weight_scales_the_loss():
    pos, neg = torch.randn(4, 1), torch.randn(4, 8)
    plain = InfoNCEHead(temperature=0.2).loss(pos, neg)['loss']
    scaled = InfoNCEHead(
        temperature=0.2, loss=dict(type='CrossEntropyLoss',
                                   loss_weight=0.4)).loss(pos, neg)
    assert torch.allclose(scaled['loss'], plain * 0.4)


def test_bad_temperature():
    with pytest.raises(ValueError, match='temperature'):
        InfoNCEHead(temperature=0)


def _embeddings(n=6, m=40, c=8):
    """float64 unit vectors: the fused and the composed losses below are
    within L = (2 (c + 2) / t + m + 3) 2^-53 = 1.1e-14 of the exact one
    (see test_fused_info_nce.py), their gradients within 1e-14 per
    component; in float32 the same bound, 8.5e-6, exceeds assert_close's
    float32 default atol (1e-5) once doubled."""
    gen = torch.Generator().manual_seed(3)
    return (torch.nn.functional.normalize(
        torch.randn(s, c, generator=gen, dtype=torch.float64), dim=1)
            for s in (n, n, m))


@pytest.mark.parametrize('loss_weight', [1.0, 0.4])
def test_loss_against_the_bank_equals_the_loss_of_the_similarities(
        loss_weight):
    query, key, bank = _embeddings()
    key[:3] = query[:3]  # three positives win
    mask = torch.zeros(6, 40, dtype=torch.bool)
    mask[1, 5] = mask[4, 0] = True
    head = InfoNCEHead(
        temperature=0.2,
        loss=dict(type='CrossEntropyLoss', loss_weight=loss_weight))
    q1, q2 = query.clone().requires_grad_(), query.clone().requires_grad_()
    fused = head.loss_against(q1, key, bank, mask)
    plain = head.loss((q2 * key).sum(1, keepdim=True), q2 @ bank.t(), mask)
    # the fused computation ran (no (N, K + 1) logits in the graph)
    node = fused['loss'].grad_fn
    if loss_weight != 1:
        node = node.next_functions[0][0]
    assert type(node).__name__ == '_InfoNCEAgainstBankBackward'
    assert fused['loss'].dtype == torch.float64
    torch.testing.assert_close(
        fused['loss'], plain['loss'], rtol=1e-12, atol=0)
    # discrete: equal as no negative is within round-off of its positive
    neg = (query @ bank.t()).masked_fill(mask, float('-inf'))
    assert ((neg.amax(1) - (query * key).sum(1)).abs() > 1e-9).all()
    assert fused['contrast_acc'].item() == plain['contrast_acc'].item() == 50
    fused['loss'].backward()
    plain['loss'].backward()
    torch.testing.assert_close(q1.grad, q2.grad, rtol=1e-10, atol=1e-12)


def test_loss_against_other_loss_configs_uses_the_similarities():
    query, key, bank = _embeddings()
    head = InfoNCEHead(
        temperature=0.2, loss=dict(type='CrossEntropyLoss', reduction='sum'))
    out = head.loss_against(query, key, bank)
    ref = head.loss((query * key).sum(1, keepdim=True), query @ bank.t())
    torch.testing.assert_close(out['loss'], ref['loss'], rtol=1e-12, atol=0)
    # summed over the 6 queries: 6 x the mean of the default loss
    mean = InfoNCEHead(temperature=0.2).loss_against(query, key, bank)
    torch.testing.assert_close(
        out['loss'], 6 * mean['loss'], rtol=1e-12, atol=0)
