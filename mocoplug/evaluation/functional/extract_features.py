# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Callable, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.dist import collect_results, get_world_size
from mmpretrain.utils import get_ori_model
from torch.utils.data import DataLoader


def pool_feature(
        feats: Union[torch.Tensor, Sequence[torch.Tensor]]) -> torch.Tensor:
    """One vector per image from a backbone's output: the last stage,
    global-average-pooled when it is a feature map (ResNet), as it is
    when it is already a vector (a ViT's class token)."""
    if isinstance(feats, (list, tuple)):
        feats = feats[-1]
    if feats.dim() == 4:
        feats = feats.mean(dim=(2, 3))
    elif feats.dim() != 2:
        raise ValueError('Cannot pool a backbone output of shape '
                         f'{tuple(feats.shape)}: expected (N, C, H, W) or '
                         '(N, C); for a ViT set out_type="cls_token"')
    return feats


@torch.no_grad()
def extract_features(
    model: nn.Module,
    dataloader: DataLoader,
    feature_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Backbone features and labels of a labelled dataset, for kNN.

    The model runs in eval mode (BN with running statistics) and is put
    back in its previous mode afterwards. In a distributed run each rank
    encodes its share and the results are gathered in dataset order.

    Args:
        model (nn.Module): A model with a ``data_preprocessor`` and an
            ``extract_feat`` method (wrapped or not), e.g. MoCo.
        dataloader (DataLoader): Yields single-view, labelled batches.
        feature_fn (callable, optional): Maps preprocessed inputs to the
            backbone output; defaults to ``model.extract_feat``.

    Returns:
        Tuple[torch.Tensor, torch.Tensor]: Features (N, C) and labels (N, )
        on the CPU, in dataset order (on rank 0; empty on other ranks).
    """
    model = get_ori_model(model)
    feature_fn = feature_fn or model.extract_feat
    was_training = model.training
    model.eval()
    parts = []
    try:
        for data in dataloader:
            data = model.data_preprocessor(data, False)
            samples = data['data_samples']
            if not samples or 'gt_label' not in samples[0]:
                raise ValueError(
                    'kNN evaluation needs labelled images, but the dataset '
                    'gives no gt_label: use a labelled split (e.g. '
                    'with_label=True) for the memory and query sets')
            feats = pool_feature(feature_fn(data['inputs'])).float().cpu()
            parts += [(f, int(s.gt_label)) for f, s in zip(feats, samples)]
    finally:
        model.train(was_training)
    if get_world_size() > 1:
        device = 'gpu' if torch.cuda.is_available() else 'cpu'
        parts = collect_results(parts, len(dataloader.dataset), device)
        if parts is None:  # not rank 0
            return torch.empty(0), torch.empty(0, dtype=torch.long)
    feats = torch.stack([f for f, _ in parts])
    labels = torch.tensor([label for _, label in parts])
    return feats, labels
