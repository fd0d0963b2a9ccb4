# Copyright (c) mocoplug contributors. All rights reserved.
import itertools
from typing import Any, Callable, Iterable, List, Optional

import torch
import torch.nn as nn
from mmengine.dist import all_reduce, get_world_size
from torch.nn.modules.batchnorm import _BatchNorm


@torch.no_grad()
def precise_bn_stats(model: nn.Module,
                     batches: Iterable,
                     num_iters: int,
                     forward: Optional[Callable[[Any], Any]] = None) -> int:
    """Set the running statistics of the model's training BN layers to the
    mean of their batch statistics over ``num_iters`` batches and processes,
    as fvcore's ``update_bn_stats`` (`Rethinking "Batch" in BatchNorm
    <https://arxiv.org/abs/2105.07576>`_). ``forward`` runs the model on a
    batch (default: its training forward). Returns the batches used (0, the
    model untouched, without BN in training mode)."""
    forward = (
        lambda data: model(**model.data_preprocessor(data, True), mode='loss')
    ) if forward is None else forward
    bns: List[_BatchNorm] = [
        m for m in model.modules()
        if isinstance(m, _BatchNorm) and m.training and m.track_running_stats
    ]
    if not bns:
        return 0
    means = [torch.zeros_like(bn.running_mean) for bn in bns]
    vars_ = [torch.zeros_like(bn.running_var) for bn in bns]
    momenta = [bn.momentum for bn in bns]
    for bn in bns:
        bn.momentum = 1.0  # running stats := statistics of the last batch
    count = 0
    try:
        for data in itertools.islice(batches, num_iters):
            forward(data)
            count += 1
            for i, bn in enumerate(bns):
                means[i] += (bn.running_mean - means[i]) / count
                vars_[i] += (bn.running_var - vars_[i]) / count
    finally:
        for bn, momentum in zip(bns, momenta):
            bn.momentum = momentum
    if count == 0:
        return 0
    for i, bn in enumerate(bns):
        if get_world_size() > 1:
            all_reduce(means[i], op='mean')
            all_reduce(vars_[i], op='mean')
        bn.running_mean.copy_(means[i])
        bn.running_var.copy_(vars_[i])
    return count
