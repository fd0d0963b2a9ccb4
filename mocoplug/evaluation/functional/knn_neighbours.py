# Copyright (c) mocoplug contributors. All rights reserved.
"""The k nearest memory features of each query, in chunks, with ties
broken by the memory index so that the result does not depend on how the
memory is split into chunks or across ranks."""
from typing import NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F

# the index of a padding entry: sorts after every real memory index
PAD_ID = torch.iinfo(torch.long).max


class Neighbours(NamedTuple):
    """The nearest memory features of R queries, nearest first.

    Attributes:
        sims (torch.Tensor): Cosine similarities (R, k), float32, in
            decreasing order; equal similarities in increasing ``ids``.
            ``-inf`` for padding (a memory smaller than k) and excluded
            entries.
        ids (torch.Tensor): Memory (dataset) indices (R, k); ``PAD_ID``
            for padding.
        labels (torch.Tensor): Their labels (R, k); 0 for padding.
    """
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
    order of :class:`Neighbours` (similarity, then lower index first).

    Exact: the result depends only on the candidates' (similarity, index)
    pairs, not on their order or on how they were split into ``parts``.
    """
    sims, ids, labels = (torch.cat(t, dim=1) for t in zip(*parts))
    by_id = ids.argsort(dim=1, stable=True)
    order = sims.gather(1, by_id).argsort(
        dim=1, descending=True, stable=True)[:, :k]
    pick = by_id.gather(1, order)
    return Neighbours(
        sims.gather(1, pick), ids.gather(1, pick), labels.gather(1, pick))


def top_columns(sim: torch.Tensor, k: int) -> torch.Tensor:
    """Columns of the k largest entries of every row, ties at the k-th
    value broken towards the lower column (``torch.topk`` leaves that
    choice to the implementation).

    A choice is left only where the (k + 1)-th largest value equals the
    k-th; those rows (almost never any) are sorted, stably, the others
    cost one ``topk``.
    """
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
    """The k most cosine-similar memory features of every query.

    The memory is read in chunks of ``bank_chunk`` rows, each normalised
    and cast to float32 on the queries' device when it is used: memory
    (R x ``bank_chunk`` similarities) stays bounded and the memory is never
    copied whole, so it may be stored in a lower precision or elsewhere.

    Args:
        query (torch.Tensor): L2-normalised float32 queries (R, C).
        bank (torch.Tensor): Memory features (n, C), any float dtype, not
            necessarily normalised.
        bank_ids (torch.Tensor): Their dataset indices (n, ), increasing.
        bank_labels (torch.Tensor): Their labels (n, ).
        k (int): Number of neighbours; padding fills up a smaller memory.
        query_ids (torch.Tensor, optional): Dataset indices of the queries
            (R, ): a query never has the memory entry of its own index as
            a neighbour (leave-one-out).
        bank_chunk (int): Memory rows per matmul.

    Returns:
        Neighbours: (R, k), nearest first.
    """
    best = no_neighbours(query.shape[0], 0, query.device)
    for start in range(0, bank.shape[0], bank_chunk):
        block = bank[start:start + bank_chunk].to(query.device, torch.float32)
        sim = query @ F.normalize(block, dim=1).t()
        ids = bank_ids[start:start + bank_chunk].to(query.device)
        if query_ids is not None:
            sim.masked_fill_(
                query_ids.view(-1, 1) == ids.view(1, -1), float('-inf'))
        cols = top_columns(sim, min(k, sim.shape[1]))
        labels = bank_labels[start:start + bank_chunk].to(query.device)
        best = merge_neighbours(
            [best,
             Neighbours(sim.gather(1, cols), ids[cols], labels[cols])], k)
    missing = k - best.sims.shape[1]
    if missing > 0:
        best = merge_neighbours(
            [best, no_neighbours(query.shape[0], missing, query.device)], k)
    return best


def weighted_votes(neighbours: Neighbours, k: int, num_classes: int,
                   temperature: float) -> torch.Tensor:
    """Class scores (R, num_classes) of the weighted kNN vote: each of the
    k nearest votes for its class with weight exp(similarity / t)
    (`Wu et al., CVPR 2018 <https://arxiv.org/abs/1805.01978>`_)."""
    weights = (neighbours.sims[:, :k] / temperature).exp()
    votes = weights.new_zeros(weights.shape[0], num_classes)
    return votes.scatter_add_(1, neighbours.labels[:, :k], weights)
