# Copyright (c) mocoplug contributors. All rights reserved.
"""kNN accuracies are discrete: a tool's figure and a direct computation
agree although their float32 features may differ by round-off (other
batch sizes, so possibly other kernels) only if no decision lies within
round-off of a tie. Round-off moves a similarity of unit vectors by a few
float32 ulps (~1e-7: there is no useful worst-case bound through a
network, so this is the measured order) and a vote exp(s / t) by ~1e-7 / t
relatively; the margins asserted here are about 1000 times that, so no
decision is left to round-off on any CPU."""
import torch
import torch.nn.functional as F

SIM_GAP = 1e-4  # k-th vs (k+1)-th nearest neighbour's similarity
VOTE_GAP = 1e-3  # winning vs runner-up class vote, relative (t >= 0.07)


def assert_knn_well_conditioned(query: torch.Tensor,
                                bank: torch.Tensor,
                                bank_labels: torch.Tensor,
                                k: int,
                                temperature: float,
                                num_classes: int,
                                exclude_self: bool = False) -> None:
    """Assert that every weighted-kNN decision of ``query`` against
    ``bank`` has a margin: the winning class's vote exceeds the runner-up's
    by VOTE_GAP of it plus every vote that round-off could move between
    classes (neighbours within SIM_GAP of the k-th nearest, which a
    computation could take in or leave out, unless they share a label)."""
    query = F.normalize(query.double(), dim=1)
    bank = F.normalize(bank.double(), dim=1)
    sims = query @ bank.t()
    if exclude_self:
        sims.fill_diagonal_(float('-inf'))
    k = min(k, bank.shape[0] - int(exclude_self))
    top = sims.topk(k, dim=1)
    votes = torch.zeros(len(query), num_classes, dtype=torch.float64)
    votes.scatter_add_(1, bank_labels[top.indices],
                       (top.values / temperature).exp())
    best = votes.topk(2, dim=1).values
    for i, (row, kth) in enumerate(zip(sims, top.values[:, -1])):
        boundary = (row - kth).abs() <= SIM_GAP
        movable = 0.
        if bank_labels[boundary].unique().numel() > 1:
            movable = (row[boundary] / temperature).exp().sum().item()
        margin = best[i, 0] - best[i, 1]
        assert margin > VOTE_GAP * best[i, 0] + 2 * movable, (i, row)
