# Copyright (c) mocoplug contributors. All rights reserved.
"""Label efficiency: scikit-learn's logistic regression on frozen features
trained with a small stratified share of the labels (SimCLR / MoCo)."""
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
    """Sorted indices of ``draws`` seeded stratified subsets of
    ``floor(fraction * N)`` labels, at least one per class."""
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
    splits = splitter.split(np.zeros(len(labels)), labels)
    return [np.sort(kept) for kept, _ in splits]


def linear_probe_accuracy(train_feats: Array,
                          train_labels: Array,
                          eval_sets: Dict[str, Tuple[Array, Array]],
                          subsets: Sequence[np.ndarray],
                          C: float = 1.0) -> Dict[str, List[float]]:
    """``{name: [top-1 (%) per subset]}`` on ``eval_sets`` of a logistic
    regression (inverse L2 strength ``C``) fitted on each subset of the
    standardised training features."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits
    train_feats = _numpy(train_feats).astype(np.float64)
    train_labels = _numpy(train_labels)
    mean, std = train_feats.mean(0), train_feats.std(0)
    std[std < 1e-8] = 1.  # constant features (e.g. empty border pixels)
    scaled = {
        n: ((_numpy(f).astype(np.float64) - mean) / std, _numpy(y))
        for n, (f, y) in eval_sets.items()
    }
    train_scaled = (train_feats - mean) / std
    out: Dict[str, List[float]] = {name: [] for name in eval_sets}
    with threadpool_limits(limits=1, user_api='blas'):
        for kept in subsets:
            clf = LogisticRegression(C=C, max_iter=5000)
            clf.fit(train_scaled[kept], train_labels[kept])
            for name, (feats, labels) in scaled.items():
                out[name].append(
                    float((clf.predict(feats) == labels).mean() * 100))
    return out
