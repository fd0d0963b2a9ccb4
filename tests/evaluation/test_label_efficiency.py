# Copyright (c) mocoplug contributors. All rights reserved.
import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from mocoplug.evaluation import linear_probe_accuracy, stratified_label_subsets


def test_subsets_are_stratified_deterministic_and_distinct():
    labels = np.repeat(
        np.arange(10),
        [120, 130, 125, 126, 124, 127, 123, 128, 129, 126])  # 1258 images
    subsets = stratified_label_subsets(labels, 0.01, draws=5, seed=0)
    assert len(subsets) == 5
    for kept in subsets:
        assert len(kept) == 12  # floor(0.01 * 1258)
        assert len(set(kept.tolist())) == 12
        counts = np.bincount(labels[kept], minlength=10)
        assert counts.min() >= 1 and counts.max() <= 2
    again = stratified_label_subsets(labels, 0.01, draws=5, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(subsets, again))
    assert len({tuple(k) for k in subsets}) == 5
    ten = stratified_label_subsets(labels, 0.1, draws=1)[0]
    assert len(ten) == 125
    assert np.abs(np.bincount(labels[ten]) - 12.5).max() <= 1


def test_too_few_labels_for_the_classes_is_a_clear_error():
    labels = np.repeat(np.arange(10), 50)
    with pytest.raises(ValueError, match='fewer than the 10 classes'):
        stratified_label_subsets(labels, 0.01, draws=1)  # 5 labels


def test_one_label_per_class_puts_the_boundary_midway():
    """Hand computation: two labelled points, 0 (class 0) and 13 (class 1),
    are symmetric about the mean of the training features (6.5) after
    standardisation, so the logistic regression splits at 6.5 whatever C:
    5 -> 0, 6 -> 0, 7 -> 1, 8 -> 1."""
    train = torch.tensor([[0.], [1.], [2.], [3.], [10.], [11.], [12.], [13.]])
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    evals = dict(
        near=(torch.tensor([[5.], [6.], [7.],
                            [8.]]), torch.tensor([0, 1, 1, 1])),
        far=(torch.tensor([[-4.], [20.]]), torch.tensor([1, 1])))
    acc = linear_probe_accuracy(train, labels, evals, [np.array([0, 7])])
    assert acc == dict(near=[75.0], far=[50.0])


def test_matches_sklearn_on_standardised_features():
    rng = np.random.RandomState(0)
    centres = rng.randn(3, 6) * 2
    labels = np.repeat(np.arange(3), 30)
    train = centres[labels] + rng.randn(90, 6) * 3
    test_labels = np.repeat(np.arange(3), 20)
    test = centres[test_labels] + rng.randn(60, 6) * 3
    subsets = stratified_label_subsets(labels, 0.2, draws=3, seed=1)

    acc = linear_probe_accuracy(train, labels, dict(test=(test, test_labels)),
                                subsets)

    mean, std = train.mean(0), train.std(0)
    expected = []
    for kept in subsets:
        clf = LogisticRegression(
            C=1.0, max_iter=5000).fit((train[kept] - mean) / std, labels[kept])
        expected.append((clf.predict(
            (test - mean) / std) == test_labels).mean() * 100)
    # the same float64 numpy standardisation and sklearn fit on the same
    # values, in the same process: the same predictions, not just close
    assert acc['test'] == pytest.approx(expected)
    assert len(set(acc['test'])) > 1  # the draws differ
