# Copyright (c) mocoplug contributors. All rights reserved.
"""The k nearest memory features of each query, ties broken by memory
index (independent of chunks and ranks)."""
from typing import NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F

# the index of a padding entry: sorts after every real memory index
PAD_ID = torch.iinfo(torch.long).max


class Neighbours(NamedTuple):
    """The nearest memory features of R queries, nearest first: float32
    cosine ``sims`` (R, k), equal ones in increasing ``ids`` (memory
    indices), and ``labels``; padding has ``-inf``, ``PAD_ID`` and 0."""
    sims: torch.Tensor
    ids: torch.Tensor
    labels: torch.Tensor


def no_neighbours(rows: int, k: int, device) -> Neighbours:
    """k padding entries for each of ``rows`` queries."""
    return Neighbours(
        torch.full((rows, k), float('-inf'), device=device),
        torch.full((rows, k), PAD_ID, dtype=torch.long, device=device),
        torch.zeros(rows, k, dtype=torch.long, device=device))


def merge_neighbours(parts: Sequence[Neighbours], k: int) -> Neighbours:
    """The k nearest of several candidate lists of the same queries, in the
    order of :class:`Neighbours`, whatever the split into ``parts``."""
    sims, ids, labels = (torch.cat(t, dim=1) for t in zip(*parts))
    by_id = ids.argsort(dim=1, stable=True)
    order = sims.gather(1, by_id).argsort(
        dim=1, descending=True, stable=True)[:, :k]
    pick = by_id.gather(1, order)
    return Neighbours(*(t.gather(1, pick) for t in (sims, ids, labels)))


def top_columns(sim: torch.Tensor, k: int) -> torch.Tensor:
    """Columns of the k largest entries of every row, ties at the k-th
    value broken towards the lower column (``torch.topk`` does not say)."""
    if k >= sim.shape[1]:
        return torch.arange(
            sim.shape[1], device=sim.device).expand(sim.shape[0], -1)
    vals, cols = sim.topk(k + 1, dim=1)
    ambiguous = vals[:, k] == vals[:, k - 1]
    cols = cols[:, :k]
    if bool(ambiguous.any()):
        rows = ambiguous.nonzero().squeeze(1)
        cols[rows] = sim[rows].sort(
            dim=1, descending=True, stable=True).indices[:, :k]
    return cols


@torch.no_grad()
def nearest_neighbours(query: torch.Tensor,
                       bank: torch.Tensor,
                       bank_ids: torch.Tensor,
                       bank_labels: torch.Tensor,
                       k: int,
                       query_ids: Optional[torch.Tensor] = None,
                       bank_chunk: int = 32768) -> Neighbours:
    """The k nearest :class:`Neighbours` in ``bank`` (increasing
    ``bank_ids``) of each L2-normalised float32 ``query`` row, none of them
    the query's own index in ``query_ids``."""
    best = no_neighbours(query.shape[0], k, query.device)
    for start in range(0, bank.shape[0], bank_chunk):
        block = bank[start:start + bank_chunk].to(query.device, torch.float32)
        sim = query @ F.normalize(block, dim=1).t()
        ids = bank_ids[start:start + bank_chunk].to(query.device)
        if query_ids is not None:
            sim.masked_fill_(
                query_ids.view(-1, 1) == ids.view(1, -1), float('-inf'))
        cols = top_columns(sim, min(k, sim.shape[1]))
        labels = bank_labels[start:start + bank_chunk].to(query.device)
        found = Neighbours(sim.gather(1, cols), ids[cols], labels[cols])
        best = merge_neighbours([best, found], k)
    return best


def weighted_votes(neighbours: Neighbours, k: int, num_classes: int,
                   temperature: float) -> torch.Tensor:
    """Class scores (R, num_classes): the k nearest vote with weight
    exp(sim / t) (`Wu et al. <https://arxiv.org/abs/1805.01978>`_)."""
    weights = (neighbours.sims[:, :k] / temperature).exp()
    votes = weights.new_zeros(weights.shape[0], num_classes)
    return votes.scatter_add_(1, neighbours.labels[:, :k], weights)
