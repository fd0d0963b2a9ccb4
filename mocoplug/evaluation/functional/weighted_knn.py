# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, Sequence

import torch
import torch.nn.functional as F

from .extract_features import FeatureShard
from .knn_neighbours import Neighbours, weighted_votes
from .sharded_weighted_knn import sharded_weighted_knn_accuracy


@torch.no_grad()
def weighted_knn_scores(query: torch.Tensor,
                        bank: torch.Tensor,
                        bank_labels: torch.Tensor,
                        num_classes: int,
                        k: int = 200,
                        temperature: float = 0.07,
                        chunk_size: int = 1024,
                        exclude_self: bool = False) -> torch.Tensor:
    """Class scores of the weighted kNN classifier of `Wu et al., CVPR
    2018 <https://arxiv.org/abs/1805.01978>`_, in query chunks.

    Args:
        query (torch.Tensor): Query features (M, D).
        bank (torch.Tensor): Bank features (N, D).
        bank_labels (torch.Tensor): Bank labels (N, ).
        num_classes (int): Number of classes.
        k (int): Neighbours (capped at N).
        temperature (float): Vote temperature.
        chunk_size (int): Queries per matmul.
        exclude_self (bool): Leave-one-out: the queries are the bank.

    Returns:
        torch.Tensor: Scores (M, num_classes).
    """
    _check(query, bank, bank_labels, exclude_self)
    query = F.normalize(query.float(), dim=1)
    bank = F.normalize(bank.float().to(query.device), dim=1)
    bank_labels = bank_labels.long().to(query.device)
    k = min(k, bank.shape[0] - int(exclude_self))
    scores = []
    for start in range(0, query.shape[0], chunk_size):
        sim = query[start:start + chunk_size] @ bank.t()
        if exclude_self:
            rows = torch.arange(sim.shape[0], device=sim.device)
            sim[rows, start + rows] = float('-inf')
        top_sim, top_idx = sim.topk(k, dim=1)
        found = Neighbours(top_sim, top_idx, bank_labels[top_idx])
        scores.append(weighted_votes(found, k, num_classes, temperature))
    return torch.cat(scores)


def _check(query: torch.Tensor, bank: torch.Tensor, bank_labels: torch.Tensor,
           exclude_self: bool) -> None:
    if bank.shape[0] != bank_labels.shape[0]:
        raise ValueError(f'weighted kNN: {bank.shape[0]} bank features but '
                         f'{bank_labels.shape[0]} labels')
    if exclude_self and query.shape[0] != bank.shape[0]:
        raise ValueError('weighted kNN: exclude_self=True needs the queries '
                         f'to be the bank, got {query.shape[0]} queries and '
                         f'{bank.shape[0]} bank features')


def weighted_knn_accuracy(query: torch.Tensor,
                          query_labels: torch.Tensor,
                          bank: torch.Tensor,
                          bank_labels: torch.Tensor,
                          num_classes: int,
                          topk: Sequence[int] = (20, 200),
                          temperature: float = 0.07,
                          exclude_self: bool = False) -> Dict[str, float]:
    """:func:`sharded_weighted_knn_accuracy` in this process, the memory
    given as ``bank`` and ``bank_labels``."""
    _check(query, bank, bank_labels, exclude_self)

    def shard(feats, labels):
        ids = torch.arange(feats.shape[0], device=feats.device)
        return FeatureShard(feats, labels.long().to(feats.device), ids)

    return sharded_weighted_knn_accuracy(
        shard(query, query_labels),
        shard(bank, bank_labels),
        num_classes,
        topk,
        temperature,
        exclude_self,
        distributed=False)
