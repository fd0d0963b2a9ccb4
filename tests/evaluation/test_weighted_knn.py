# Copyright (c) mocoplug contributors. All rights reserved.
import math

import pytest
import torch

from mocoplug.evaluation import (pool_feature, weighted_knn_accuracy,
                                 weighted_knn_scores)


def test_scores_equal_a_hand_computation():
    bank = torch.tensor([[1., 0.], [0., 1.], [1., 1.], [-1., 0.]])
    labels = torch.tensor([0, 1, 1, 0])
    query = torch.tensor([[2., 0.]])  # normalised: (1, 0)
    scores = weighted_knn_scores(
        query, bank, labels, num_classes=2, k=2, temperature=0.5)
    # neighbours: bank[0] (cos 1, class 0) and bank[2] (cos 0.707, class 1)
    expected = [math.exp(1 / 0.5), math.exp(math.sqrt(0.5) / 0.5)]
    # float32: the similarities are within 4 u of 1 and sqrt(1/2), the
    # exponent 2x that, the exp adds u: relative error < 12 u = 7e-7
    assert scores[0].tolist() == pytest.approx(expected, rel=1e-5)


def test_k_larger_than_the_bank_and_chunking():
    torch.manual_seed(0)
    bank, labels = torch.randn(30, 8), torch.randint(0, 3, (30, ))
    query = torch.randn(50, 8)
    whole = weighted_knn_scores(query, bank, labels, 3, k=500)
    chunked = weighted_knn_scores(query, bank, labels, 3, k=500, chunk_size=7)
    # float32, and a chunk of 7 (or the last one of 1) rows may run another
    # matmul kernel than 50: each similarity of unit 8-d vectors is within
    # 12 u of the exact one, exp(s / 0.07) then within 12 u / 0.07 + u =
    # 173 u relatively, a class score (a sum of <= 30 such positive terms)
    # within 204 u = 1.2e-5: the two differ by < 2.4e-5 relatively (k=500
    # keeps all 30 neighbours: no selection that round-off could change)
    assert torch.allclose(whole, chunked, rtol=5e-5, atol=0)


def test_accuracy_of_separable_clusters():
    torch.manual_seed(0)
    centers = torch.eye(4) * 10
    labels = torch.arange(4).repeat_interleave(5)
    bank = centers[labels] + torch.randn(20, 4) * 0.1
    query_labels = torch.tensor([3, 1, 0, 2])
    query = centers[query_labels] + torch.randn(4, 4) * 0.1
    wrong = query_labels.roll(1)
    acc = weighted_knn_accuracy(
        query, query_labels, bank, labels, 4, topk=(1, 5))
    assert acc == {'top1_k1': 100.0, 'top1_k5': 100.0}
    assert weighted_knn_accuracy(
        query, wrong, bank, labels, 4, topk=(5, ))['top1_k5'] == 0.0


def test_pool_feature():
    assert pool_feature(
        (torch.ones(2, 3, 4, 4) * 2, )).tolist() == [[2.] * 3] * 2
    assert pool_feature(torch.ones(2, 5)).shape == (2, 5)
    with pytest.raises(ValueError, match='cls_token'):
        pool_feature(torch.ones(2, 3, 4))
