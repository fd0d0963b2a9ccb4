# Copyright (c) mocoplug contributors. All rights reserved.
import math
from typing import Dict, Sequence

import torch
import torch.nn.functional as F
from mmengine.dist import all_gather, all_reduce, get_dist_info

from .extract_features import FeatureShard, pad_rows
from .knn_neighbours import (Neighbours, merge_neighbours, nearest_neighbours,
                             no_neighbours, weighted_votes)


@torch.no_grad()
def sharded_weighted_knn_accuracy(
        query: FeatureShard,
        bank: FeatureShard,
        num_classes: int,
        topk: Sequence[int] = (20, 200),
        temperature: float = 0.07,
        exclude_self: bool = False,
        query_chunk: int = 4096,
        bank_chunk: int = 32768,
        distributed: bool = True) -> Dict[str, float]:
    """Top-1 accuracy (%) of the weighted kNN classifier of `Wu et al., CVPR
    2018 <https://arxiv.org/abs/1805.01978>`_, every rank keeping its shard
    of the memory (ties go to the lower dataset index).

    Args:
        query (FeatureShard): This rank's query features.
        bank (FeatureShard): This rank's memory features (any float dtype).
        num_classes (int): Number of classes.
        topk (Sequence[int]): Numbers of neighbours, each capped at the
            memory size (less one, leave-one-out); keys name the k used.
        temperature (float): Vote temperature.
        exclude_self (bool): Leave-one-out: no query is its own neighbour.
        query_chunk (int): Queries per round, over all ranks.
        bank_chunk (int): Memory rows per matmul.
        distributed (bool): Split over the default process group's ranks;
            False computes in this process alone.

    Returns:
        Dict[str, float]: ``{'top1_k20': ..., 'top1_k200': ...}``, one per
        k used (a memory of 99 images: ``top1_k20``, ``top1_k99``).
    """
    rank, world_size = get_dist_info() if distributed else (0, 1)
    device = query.feats.device
    per_rank = max(1, query_chunk // world_size)
    sizes = torch.tensor([bank.ids.numel(), query.ids.numel()], device=device)
    own_rounds = math.ceil(query.ids.numel() / per_rank)
    widths = torch.tensor([own_rounds, query.feats.shape[-1]], device=device)
    if world_size > 1:
        all_reduce(sizes)
        all_reduce(widths, op='max')
    (num_bank, num_query), (rounds, dim) = sizes.tolist(), widths.tolist()
    k_max = min(max(topk), num_bank - int(exclude_self))
    if k_max < 1 or num_query < 1:
        raise ValueError(
            f'weighted kNN: {num_bank} memory features and {num_query} '
            f'queries{" (leave-one-out)" if exclude_self else ""}; need at '
            'least one query and one neighbour')
    topk = list(dict.fromkeys(min(k, k_max) for k in topk))  # the k used
    correct = torch.zeros(len(topk), dtype=torch.long, device=device)
    for start in range(0, rounds * per_rank, per_rank):
        feats = query.feats[start:start + per_rank].reshape(-1, dim)
        rows = F.normalize(feats.float(), dim=1)
        ids = query.ids[start:start + per_rank]
        if world_size > 1:  # this round's queries of every rank, padded
            rows = torch.cat(all_gather(pad_rows(rows, per_rank, 0.)))
            ids = torch.cat(all_gather(pad_rows(ids, per_rank, -1)))
        real = ids >= 0  # padding rows (id -1) get no neighbours
        found = no_neighbours(rows.shape[0], k_max, rows.device)
        if bool(real.any()):
            own = ids[real] if exclude_self else None
            part = nearest_neighbours(rows[real], bank.feats, bank.ids,
                                      bank.labels, k_max, own, bank_chunk)
            for whole, values in zip(found, part):
                whole[real] = values
        if world_size > 1:  # the nearest of every rank's nearest
            gathered = zip(*(all_gather(t) for t in found))
            found = merge_neighbours([Neighbours(*p) for p in gathered], k_max)
        lo = rank * per_rank  # this rank's queries of the round
        found = Neighbours(*(t[lo:lo + feats.shape[0]] for t in found))
        labels = query.labels[start:start + per_rank].to(device)
        for i, k in enumerate(topk):
            votes = weighted_votes(found, k, num_classes, temperature)
            correct[i] += (votes.argmax(dim=1) == labels).sum()
    if world_size > 1:
        all_reduce(correct)
    counts = correct.tolist()
    return {f'top1_k{k}': c * 100 / num_query for k, c in zip(topk, counts)}
