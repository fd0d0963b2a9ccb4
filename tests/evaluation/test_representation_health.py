# Copyright (c) mocoplug contributors. All rights reserved.
"""The health measures against element-by-element hand computations."""
import math

import pytest
import torch

from mocoplug.evaluation import (alignment, embedding_std,
                                 relative_parameter_distance, uniformity)

X = [[3., 4., 0.], [0., 2., 0.], [1., 1., 1.], [-2., 0., 2.]]
Y = [[0., 5., 0.], [1., 0., 0.], [1., 1., 0.], [0., 0., -3.]]
# The measures compute in float32 (u = 2^-24) from unit vectors, through
# fewer than 30 roundings of O(1) terms (normalising 4, a mean or std over
# 4 rows 10, over 3 dimensions 3; the column stds here are >= 0.37, so the
# square root does not amplify): within 30 u = 2e-6 of the exact values;
# uniformity's exponent t d^2 <= 8 scales its share: 8 x 10 u = 5e-6. The
# values here are >= 0.47 in magnitude, so rel=1e-5 holds on any CPU
# (pytest.approx's default, 1e-6, was below these bounds).
RTOL = 1e-5


def unit(rows):
    out = []
    for row in rows:
        norm = math.sqrt(sum(v * v for v in row))
        out.append([v / norm for v in row])
    return out


def sq_dist(a, b):
    return sum((u - v)**2 for u, v in zip(a, b))


def test_embedding_std_is_the_mean_per_dimension_std_of_unit_vectors():
    x = unit(X)
    n, d = len(x), len(x[0])
    stds = []
    for j in range(d):
        col = [row[j] for row in x]
        mean = sum(col) / n
        stds.append(math.sqrt(sum((v - mean)**2 for v in col) / (n - 1)))
    assert embedding_std(torch.tensor(X)).item() == pytest.approx(
        sum(stds) / d, rel=RTOL)


def test_embedding_std_is_zero_at_collapse_and_near_1_over_sqrt_d_spread():
    # exact: every row normalises to 0.25 exactly, so the stds are 0
    assert embedding_std(torch.ones(8, 16) * 3).item() == 0
    spread = torch.randn(4096, 64, generator=torch.Generator().manual_seed(0))
    assert embedding_std(spread).item() == pytest.approx(
        1 / math.sqrt(64), rel=0.02)


def test_alignment_is_the_mean_squared_distance_of_positive_pairs():
    x, y = unit(X), unit(Y)
    expected = sum(sq_dist(a, b) for a, b in zip(x, y)) / len(x)
    assert alignment(torch.tensor(X), torch.tensor(Y)).item() == \
        pytest.approx(expected, rel=RTOL)


def test_uniformity_is_the_log_mean_gaussian_potential_over_pairs():
    x = unit(X)
    for t in (2., 0.5):
        pots = [
            math.exp(-t * sq_dist(x[i], x[j])) for i in range(len(x))
            for j in range(i + 1, len(x))
        ]
        assert uniformity(torch.tensor(X), t).item() == pytest.approx(
            math.log(sum(pots) / len(pots)), rel=RTOL)
    # identical rows: distances exactly 0, exp(0) = 1, log(1) = 0
    assert uniformity(torch.ones(5, 3)).item() == pytest.approx(0, abs=1e-6)


def test_relative_parameter_distance_treats_all_tensors_as_one_vector():
    online = [torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([5.])]
    target = [torch.tensor([[1., 0.], [3., 1.]]), torch.tensor([1.])]
    diff = math.sqrt(2**2 + 3**2 + 4**2)
    norm = math.sqrt(1 + 4 + 9 + 16 + 25)
    assert relative_parameter_distance(online, target).item() == \
        pytest.approx(diff / norm)
    with pytest.raises(ValueError, match='equally long'):
        relative_parameter_distance(online, target[:1])
