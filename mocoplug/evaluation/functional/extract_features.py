# Copyright (c) mocoplug contributors. All rights reserved.
import time
from typing import Callable, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as torch_dist
import torch.nn as nn
from mmengine.dataset import InfiniteSampler
from mmengine.dist import all_gather, get_comm_device, get_dist_info
from mmengine.logging import print_log
from mmpretrain.utils import get_ori_model
from torch.utils.data import DataLoader


class FeatureShard(NamedTuple):
    """One rank's share of a labelled dataset's features: float32 ``feats``
    (n, C), int64 ``labels`` (n, ) and increasing dataset indices ``ids``."""
    feats: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor


def pool_feature(
        feats: Union[torch.Tensor, Sequence[torch.Tensor]]) -> torch.Tensor:
    """One vector per image from a backbone's output: the last stage,
    global-average-pooled when it is a feature map."""
    if isinstance(feats, (list, tuple)):
        feats = feats[-1]
    if feats.dim() == 4:
        feats = feats.mean(dim=(2, 3))
    elif feats.dim() != 2:
        raise ValueError('Cannot pool a backbone output of shape '
                         f'{tuple(feats.shape)}: expected (N, C, H, W) or '
                         '(N, C); for a ViT set out_type="cls_token"')
    return feats


def check_one_pass(dataloader: DataLoader,
                   field: str = 'the feature dataloader') -> None:
    """ValueError naming ``field`` unless ``dataloader`` ends: features are
    read in one pass, which an ``InfiniteSampler`` never finishes."""
    if isinstance(getattr(dataloader, 'sampler', None), InfiniteSampler):
        raise ValueError(
            f'{field}.sampler is an InfiniteSampler, whose pass over the '
            'images never ends: features are extracted in one pass; set '
            f"{field}.sampler=dict(type='DefaultSampler', shuffle=False).")


@torch.no_grad()
def extract_feature_shard(model: nn.Module,
                          dataloader: DataLoader,
                          feature_fn: Optional[Callable[[torch.Tensor],
                                                        torch.Tensor]] = None,
                          progress: Optional[str] = None,
                          labelled: bool = True) -> FeatureShard:
    """This rank's backbone features of a labelled dataset (eval mode, the
    model's device); the sampler splits as ``DefaultSampler``.

    Args:
        model (nn.Module): A model (wrapped or not) with a
            ``data_preprocessor`` and ``extract_feat``, e.g. MoCo.
        dataloader (DataLoader): Yields single-view, labelled batches.
        feature_fn (callable, optional): Replaces ``model.extract_feat``.
        progress (str, optional): A name: rank 0 then logs the images done
            (all ranks) and images/s every tenth of the batches.
        labelled (bool): False reads unlabelled images (labels -1).

    Returns:
        FeatureShard: Sorted by dataset index.
    """
    check_one_pass(dataloader)
    model = get_ori_model(model)
    feature_fn = feature_fn or model.extract_feat
    rank, world_size = get_dist_info()
    size = len(dataloader.dataset)
    every = max(1, len(dataloader) // 10) if progress and rank == 0 else 0
    start, was_training = time.perf_counter(), model.training
    model.eval()
    feats, labels, ids = [], [], []
    position = rank  # of the next row in the sampler's padded index list
    try:
        for data in dataloader:
            samples = data['data_samples']
            if labelled and (not samples or 'gt_label' not in samples[0]):
                raise ValueError('kNN evaluation needs labelled images (no '
                                 'gt_label): e.g. with_label=True')
            real = len(range(position, size, world_size)[:len(samples)])
            for i, s in enumerate(samples[:real]):
                labels.append(int(s.gt_label) if labelled else -1)
                ids.append(int(s.get('sample_idx', position + world_size * i)))
            position += world_size * len(samples)
            data = model.data_preprocessor(data, False)
            batch = pool_feature(feature_fn(data['inputs']))
            feats.append(batch[:real].float())
            if every and (len(feats) % every == 0
                          or len(feats) == len(dataloader)):
                done = min(size, position - rank)
                print_log(
                    f'{progress}: {done}/{size} images, '
                    f'{done / (time.perf_counter() - start):.1f} images/s',
                    logger='current')
    finally:
        model.train(was_training)
    device = feats[0].device if feats else next(model.parameters(),
                                                torch.empty(0)).device
    if not feats:  # a rank that got no images (tiny dataset, many ranks)
        feats = [torch.empty(0, 0, device=device)]
    shard = FeatureShard(
        torch.cat(feats),
        torch.tensor(labels, dtype=torch.long, device=device),
        torch.tensor(ids, dtype=torch.long, device=device))
    if shard.ids.numel() > 1 and not bool((shard.ids.diff() > 0).all()):
        order = shard.ids.argsort()
        shard = FeatureShard(*(t[order] for t in shard))
    return shard


def gather_feature_shards(shard: FeatureShard, dst: int = 0) -> FeatureShard:
    """The features of all ranks on rank ``dst``, on the CPU, in dataset
    order (empty tensors on the other ranks)."""
    rank, world_size = get_dist_info()
    if world_size == 1:
        return FeatureShard(*(t.cpu() for t in shard))
    sizes = torch.tensor([shard.ids.numel(), shard.feats.shape[-1]],
                         device=shard.ids.device)
    longest, dim = torch.stack(all_gather(sizes)).max(dim=0).values.tolist()
    padded = (pad_rows(t, longest, fill)
              for t, fill in zip((shard.feats.reshape(-1, dim), shard.labels,
                                  shard.ids), (0., 0, -1)))
    parts = [_gather(t, dst, rank, world_size) for t in padded]
    if rank != dst:
        return FeatureShard(
            torch.empty(0, dim), torch.empty(0, dtype=torch.long),
            torch.empty(0, dtype=torch.long))
    feats, labels, ids = (torch.cat(p).cpu() for p in parts)
    real = ids >= 0
    order = ids[real].argsort()
    return FeatureShard(*(t[real][order] for t in (feats, labels, ids)))


def _gather(tensor: torch.Tensor, dst: int, rank: int, world_size: int):
    """torch's gather on the backend's device."""
    tensor = tensor.to(get_comm_device())
    out = [torch.empty_like(tensor)
           for _ in range(world_size)] if rank == dst else None
    torch_dist.gather(tensor, out, dst)
    return out


def pad_rows(tensor: torch.Tensor, rows: int, fill) -> torch.Tensor:
    """``tensor`` with rows of ``fill`` appended up to ``rows`` rows."""
    pad = tensor.new_full((rows - tensor.shape[0], *tensor.shape[1:]), fill)
    return torch.cat([tensor, pad])


def extract_features(
    model: nn.Module,
    dataloader: DataLoader,
    feature_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Features (N, C) and labels (N, ) of a labelled dataset on rank 0's
    CPU, in dataset order (:func:`extract_feature_shard` gathered)."""
    shard = gather_feature_shards(
        extract_feature_shard(model, dataloader, feature_fn))
    return shard.feats, shard.labels
