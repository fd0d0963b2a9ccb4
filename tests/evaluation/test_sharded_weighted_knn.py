# Copyright (c) mocoplug contributors. All rights reserved.
"""The sharded kNN against the direct computation (one similarity matrix
per k, ``weighted_knn_scores``) and against a hand-sorted reference, in one
process and on two gloo ranks."""
import os

import pytest
import torch
import torch.nn.functional as F

from mocoplug.evaluation import (FeatureShard, merge_neighbours,
                                 nearest_neighbours, weighted_knn_accuracy,
                                 weighted_knn_scores, weighted_votes)
from mocoplug.evaluation.functional.knn_neighbours import PAD_ID, top_columns
from mocoplug.evaluation.functional.sharded_weighted_knn import \
    sharded_weighted_knn_accuracy
from ..gloo import (count_collective_bytes, free_port, join_gloo_group,
                    run_two_ranks)


def sign_features(n, seed, dim=16):
    """Unit vectors of entries +-1/4 (dim 16): every product and sum of
    them is a multiple of 1/16 in [-1, 1], exact in float32 in any order,
    so the similarities are the same whatever the matmul's chunking, and
    ties (only 33 possible values) are everywhere."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2, (n, dim), generator=gen) * 2 - 1) * 0.25


def gaussian(n, seed, dim=8):
    return torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))


def labels_of(n, classes, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, classes, (n, ), generator=gen)


def reference_neighbours(query, bank, k, exclude_self=False):
    """Sort every memory entry by (similarity desc, index asc), in float64
    Python, and keep k (no chunks, no topk)."""
    out = []
    for i, q in enumerate(query.double()):
        pairs = [(-float(q @ b), j) for j, b in enumerate(bank.double())
                 if not (exclude_self and i == j)]
        out.append([j for _, j in sorted(pairs)[:k]])
    return torch.tensor(out)


def test_top_columns_breaks_ties_at_the_kth_value_towards_lower_columns():
    sim = torch.tensor([[1., 3., 2., 3., 3.], [5., 4., 3., 2., 1.]])
    cols = top_columns(sim, 2)
    assert sorted(cols[0].tolist()) == [1, 3]  # 3 at columns 1, 3, 4
    assert sorted(cols[1].tolist()) == [0, 1]
    assert sorted(top_columns(sim, 4)[0].tolist()) == [1, 2, 3, 4]


def test_merge_orders_by_similarity_then_index_and_pads_last():
    first = (torch.tensor([[0.5, 0.25]]), torch.tensor([[7, 3]]),
             torch.tensor([[1, 2]]))
    pad = float('-inf')
    second = (torch.tensor([[0.5, pad]]), torch.tensor([[4, PAD_ID]]),
              torch.tensor([[3, 0]]))
    parts = [first, second]
    merged = merge_neighbours(parts, 3)
    assert merged.ids.tolist() == [[4, 7, 3]]
    assert merged.labels.tolist() == [[3, 1, 2]]
    assert merged.sims.tolist() == [[0.5, 0.5, 0.25]]


@pytest.mark.parametrize('bank_chunk', [1000, 7, 1])
@pytest.mark.parametrize('exclude_self', [False, True])
def test_neighbours_equal_a_full_sort_whatever_the_chunking(
        bank_chunk, exclude_self):
    bank = sign_features(60, seed=0)
    query = bank[:25] if exclude_self else sign_features(25, seed=1)
    labels = labels_of(60, 4, seed=2)
    k = 9
    found = nearest_neighbours(
        F.normalize(query, dim=1),
        bank,
        torch.arange(60),
        labels,
        k,
        query_ids=torch.arange(25) if exclude_self else None,
        bank_chunk=bank_chunk)
    expected = reference_neighbours(query, bank, k, exclude_self)
    assert torch.equal(found.ids, expected)
    assert torch.equal(found.labels, labels[expected])
    # the similarities are exact here, so equal to the float64 ones
    expected_sims = (query.double() @ bank.double().t()).gather(1, expected)
    assert torch.equal(found.sims.double(), expected_sims)


def test_a_memory_smaller_than_k_is_padded_with_no_votes():
    bank = sign_features(3, seed=0)
    found = nearest_neighbours(
        F.normalize(sign_features(2, seed=1), dim=1), bank, torch.arange(3),
        torch.tensor([0, 1, 1]), 5)
    assert (found.ids[:, 3:] == PAD_ID).all()
    votes = weighted_votes(found, 5, 2, 0.07)
    assert torch.equal(votes, weighted_votes(found, 3, 2, 0.07))


# Tolerance of the scores against weighted_knn_scores, on Gaussian features
# (C = 8, t = 0.07, k <= 20). Both compute the same float32 dot products
# of the same normalised vectors, but with matmuls of other shapes, whose
# summation order may differ: |ds| <= C 2^-24 = 5e-7 (|q||b| = 1), and as
# much again from the normalisation, so each weight exp(s / t) moves by a
# factor of at most exp(1e-6 / 0.07) - 1 = 1.5e-5; the vote sums of at
# most 20 positive terms add (20 - 1) 2^-24 = 1.1e-6. rtol 1e-4 holds on
# any machine, provided the neighbour sets agree, i.e. no two similarities
# within 1e-6 of each other straddle the k-th place (asserted below, in
# float64: a 1e-5 margin).
SCORES_RTOL = 1e-4
SIM_GAP = 1e-5


@pytest.mark.parametrize('exclude_self', [False, True])
def test_scores_and_accuracy_equal_the_direct_computation(exclude_self):
    bank, labels = gaussian(100, seed=0), labels_of(100, 5, seed=1)
    query = bank if exclude_self else gaussian(50, seed=2)
    query_labels = labels if exclude_self else labels_of(50, 5, seed=3)
    rows = query.shape[0]
    topk = (1, 5, 20)
    found = nearest_neighbours(
        F.normalize(query, dim=1),
        bank,
        torch.arange(100),
        labels,
        max(topk),
        query_ids=torch.arange(rows) if exclude_self else None,
        bank_chunk=64)
    unit_query = F.normalize(query.double(), dim=1)
    sims = unit_query @ F.normalize(bank.double(), dim=1).t()
    if exclude_self:
        sims.fill_diagonal_(float('-inf'))
    ordered = sims.sort(dim=1, descending=True).values
    expected = {}
    for k in topk:
        assert (ordered[:, k - 1] - ordered[:, k]).min() > SIM_GAP
        direct = weighted_knn_scores(
            query, bank, labels, 5, k, exclude_self=exclude_self)
        scores = weighted_votes(found, k, 5, 0.07)
        torch.testing.assert_close(scores, direct, rtol=SCORES_RTOL, atol=0)
        # the predictions agree too: no class scores this close
        top2 = direct.topk(2, dim=1).values
        assert ((top2[:, 0] - top2[:, 1]) / top2[:, 0]).min() > \
            4 * SCORES_RTOL
        pred = direct.argmax(dim=1)
        hits = (pred == query_labels).double()
        expected[f'top1_k{k}'] = hits.mean().item() * 100
    accuracy = weighted_knn_accuracy(
        query, query_labels, bank, labels, 5, topk, exclude_self=exclude_self)
    assert accuracy == pytest.approx(expected, rel=1e-12)
    # rounds of a few queries and small memory chunks: the same figures
    chunked = sharded_weighted_knn_accuracy(
        FeatureShard(query, query_labels, torch.arange(rows)),
        FeatureShard(bank, labels, torch.arange(100)),
        5,
        topk,
        exclude_self=exclude_self,
        query_chunk=7,
        bank_chunk=13,
        distributed=False)
    assert chunked == pytest.approx(expected, rel=1e-12)


def test_half_precision_memory_is_read_in_float32_chunks():
    bank = sign_features(50, seed=0)  # +-1/4: exact in float16 too
    query, labels = sign_features(20, seed=1), labels_of(50, 3, seed=2)
    query_labels = labels_of(20, 3, seed=3)
    full = weighted_knn_accuracy(query, query_labels, bank, labels, 3, (5, 20))
    half = sharded_weighted_knn_accuracy(
        FeatureShard(query, query_labels, torch.arange(20)),
        FeatureShard(bank.half(), labels, torch.arange(50)),
        3, (5, 20),
        distributed=False)
    assert half == full


def test_nothing_to_compare_is_refused():
    empty = FeatureShard(
        torch.empty(0, 4), torch.empty(0, dtype=torch.long),
        torch.empty(0, dtype=torch.long))
    one = FeatureShard(
        torch.ones(1, 4), torch.zeros(1, dtype=torch.long),
        torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match='at least one'):
        sharded_weighted_knn_accuracy(one, empty, 2, distributed=False)
    with pytest.raises(ValueError, match='leave-one-out'):
        sharded_weighted_knn_accuracy(
            one, one, 2, exclude_self=True, distributed=False)


# ------------------------------------------------------------- two ranks

BANK, QUERIES, DIM, K = 2000, 30, 16, 10
LEAVE_ONE_OUT = 60  # images, leave-one-out


def _sharded_worker(rank, port, out_dir):
    import torch.distributed as dist
    join_gloo_group(rank, port)
    record = dict(received=0, objects=0)
    count_collective_bytes(record)
    bank, query = sign_features(BANK, seed=0), sign_features(QUERIES, seed=1)
    labels, query_labels = labels_of(BANK, 4, 2), labels_of(QUERIES, 4, 3)

    def shard(feats, labels):  # DefaultSampler's: indices r, r + 2, ...
        ids = torch.arange(rank, feats.shape[0], 2)
        return FeatureShard(feats[ids], labels[ids], ids)

    results = [
        sharded_weighted_knn_accuracy(
            shard(query, query_labels),
            shard(bank, labels),
            4, (1, K),
            query_chunk=8,
            bank_chunk=100)
    ]
    received = dict(record)
    images = shard(bank[:LEAVE_ONE_OUT], labels[:LEAVE_ONE_OUT])
    results.append(
        sharded_weighted_knn_accuracy(
            images, images, 4, (1, K), exclude_self=True, query_chunk=16))
    torch.save(
        dict(results=results, received=received),
        os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


def test_two_ranks_equal_one_process_and_never_gather_the_memory(tmp_path):
    run_two_ranks(_sharded_worker, free_port(), str(tmp_path))
    bank, query = sign_features(BANK, seed=0), sign_features(QUERIES, seed=1)
    labels, query_labels = labels_of(BANK, 4, 2), labels_of(QUERIES, 4, 3)
    images, image_labels = bank[:LEAVE_ONE_OUT], labels[:LEAVE_ONE_OUT]
    loo = (images, image_labels, images, image_labels)
    expected = [
        weighted_knn_accuracy(query, query_labels, bank, labels, 4, (1, K)),
        weighted_knn_accuracy(*loo, 4, (1, K), exclude_self=True)
    ]
    outs = [torch.load(tmp_path / f'{r}.pth') for r in range(2)]
    for out in outs:
        # the similarities are exact (see sign_features), ties are broken
        # by the index: exactly the figures of one process
        assert out['results'] == expected
        # per round of 8 queries (4 per rank): the queries (8 x 16 x 4 B,
        # ids 8 x 8 B) and 2 ranks' candidates (2 x 8 x K x (4 + 8 + 8)),
        # ceil(15 / 4) = 4 rounds, plus a few counters; the memory (2000 x
        # 16 x 4 B = 128 kB) never travels
        per_round = 8 * DIM * 4 + 8 * 8 + 2 * 8 * K * 20
        assert out['received']['received'] <= 4 * per_round + 256
        assert out['received']['objects'] == 0


@pytest.mark.parametrize('exclude_self', [False, True])
def test_a_capped_k_is_reported_as_the_k_used(exclude_self):
    """A memory of 12 images with k = 5, 20, 200: k is capped at 12 (11
    leave-one-out), the figure is the k-used vote, named by that k, and the
    two capped k are one figure."""
    bank, labels = gaussian(12, seed=4), labels_of(12, 3, seed=5)
    query = bank if exclude_self else gaussian(9, seed=6)
    query_labels = labels if exclude_self else labels_of(9, 3, seed=7)
    used = 12 - int(exclude_self)
    result = weighted_knn_accuracy(
        query,
        query_labels,
        bank,
        labels,
        3, (5, 20, 200),
        exclude_self=exclude_self)
    assert list(result) == ['top1_k5', f'top1_k{used}']
    for k in (5, used):
        pred = weighted_knn_scores(
            query, bank, labels, 3, k, exclude_self=exclude_self).argmax(1)
        assert result[f'top1_k{k}'] == pytest.approx(
            (pred == query_labels).double().mean().item() * 100, rel=1e-12)
