# Copyright (c) mocoplug contributors. All rights reserved.
"""Label efficiency: a linear classifier on frozen features trained with a
small stratified share of the labels (the semi-supervised protocol of
SimCLR / MoCo evaluations, here with scikit-learn's logistic regression, as
it is exact and takes milliseconds on a few thousand features)."""
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np
import torch

Array = Union[np.ndarray, torch.Tensor]


def _numpy(x: Array) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else \
        np.asarray(x)


def stratified_label_subsets(labels: Array,
                             fraction: float,
                             draws: int,
                             seed: int = 0) -> List[np.ndarray]:
    """Indices of ``draws`` random labelled subsets, each holding
    ``floor(fraction * N)`` images with every class in proportion (at least
    one image per class).

    scikit-learn's ``StratifiedShuffleSplit``: the same ``seed`` gives the
    same subsets, so every encoder is trained on the same labelled images.

    Args:
        labels (array): Labels of the training images (N, ).
        fraction (float): Share of the labels to keep, in (0, 1).
        draws (int): Number of subsets.
        seed (int): Seed of the draws. Defaults to 0.

    Returns:
        List[np.ndarray]: Sorted indices into ``labels``, one array a draw.
    """
    from sklearn.model_selection import StratifiedShuffleSplit

    labels = _numpy(labels)
    num_classes = len(np.unique(labels))
    size = int(np.floor(fraction * len(labels)))
    if not 0 < fraction < 1 or size < num_classes:
        raise ValueError(
            f'label fraction {fraction} of {len(labels)} images keeps {size} '
            f'labels, fewer than the {num_classes} classes: use a fraction '
            f'of at least {num_classes / len(labels):.4f} (and below 1)')
    splitter = StratifiedShuffleSplit(
        n_splits=draws, train_size=size, random_state=seed)
    return [
        np.sort(kept)
        for kept, _ in splitter.split(np.zeros(len(labels)), labels)
    ]


def linear_probe_accuracy(train_feats: Array,
                          train_labels: Array,
                          eval_sets: Dict[str, Tuple[Array, Array]],
                          subsets: Sequence[np.ndarray],
                          C: float = 1.0) -> Dict[str, List[float]]:
    """Top-1 accuracy (%) of a logistic-regression classifier trained on
    the labelled subsets of frozen training features.

    Features are standardised with the mean and standard deviation of all
    training features (which needs no label), then one L2-regularised
    multinomial logistic regression (``C``, lbfgs) is fitted per subset
    and evaluated on every evaluation set.

    Args:
        train_feats (array): Features of all training images (N, D).
        train_labels (array): Their labels (N, ); only the subsets' are
            used.
        eval_sets (dict): ``{name: (features (M, D), labels (M, ))}``.
        subsets (sequence): Index arrays into the training images, e.g.
            from :func:`stratified_label_subsets`.
        C (float): Inverse L2 regularisation strength. Defaults to 1.

    Returns:
        Dict[str, List[float]]: ``{name: [accuracy per subset]}``.
    """
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    train_feats = _numpy(train_feats).astype(np.float64)
    train_labels = _numpy(train_labels)
    mean = train_feats.mean(0)
    std = train_feats.std(0)
    std[std < 1e-8] = 1.  # constant features (e.g. empty border pixels)

    def scale(x):
        return (_numpy(x).astype(np.float64) - mean) / std

    scaled = {
        name: (scale(feats), _numpy(labels))
        for name, (feats, labels) in eval_sets.items()
    }
    train_scaled = scale(train_feats)
    out: Dict[str, List[float]] = {name: [] for name in eval_sets}
    # One BLAS thread: the matrices are small, and next to torch's OpenMP
    # threads a multi-threaded OpenBLAS is far slower
    # (docs/design_notes.md#cpu-speed-choices).
    with threadpool_limits(limits=1, user_api='blas'):
        for kept in subsets:
            clf = LogisticRegression(C=C, max_iter=5000)
            clf.fit(train_scaled[kept], train_labels[kept])
            for name, (feats, labels) in scaled.items():
                out[name].append(
                    float((clf.predict(feats) == labels).mean() * 100))
    return out
