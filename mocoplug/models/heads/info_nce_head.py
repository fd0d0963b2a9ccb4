# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, List, Optional, Union

import torch
from mmengine.model import BaseModule
from mmpretrain.models.losses import CrossEntropyLoss

from mocoplug.registry import MODELS
from ..utils.fused_info_nce import fused_info_nce
from ..utils.precision import similarity_dtype


@MODELS.register_module()
class InfoNCEHead(BaseModule):
    """InfoNCE loss over one positive and many negatives, with its accuracy.

    As in `Momentum Contrast for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_, eq. (1)::

        L = -log exp(q.k+ / t) / (exp(q.k+ / t) + sum_i exp(q.k_i / t))

    computed as a (K+1)-way cross-entropy whose logits are
    ``[q.k+, q.k_1 .. q.k_K] / t`` with the positive at index 0. Besides the
    loss it reports the top-1 accuracy of that (K+1)-way classification
    ("contrastive accuracy", in percent): the share of queries whose
    positive key scores above every negative. A model guessing at random
    has loss ln(K+1) and accuracy 100/(K+1).

    Negatives flagged by ``neg_mask`` (e.g. older keys of the query's own
    image, or the positive itself when the negatives are the gathered batch
    as in MoCo v3) are removed from both the loss and the accuracy.

    Two entry points: :meth:`loss` takes the similarities (any loss config),
    :meth:`loss_against` (also the module's ``forward``, so forward hooks,
    e.g. ``RepresentationHealthHook``'s, observe its inputs) the embeddings
    and the bank of negative keys (the queue); with the default loss it
    computes the same value without the (N, K + 1) logits tensor
    (:func:`~mocoplug.models.utils.fused_info_nce`), which at K = 65536
    saves most of the loss's time.

    Args:
        temperature (float): Temperature t (0.07 for MoCo v1, 0.2 for v2).
            Defaults to 0.2.
        loss (dict): Config of the classification loss. ``loss_weight``
            scales the loss (MoCo v3 uses ``2 * temperature``). Defaults to
            ``dict(type='CrossEntropyLoss')`` (mmpretrain's).
        init_cfg (dict or list[dict], optional): Initialization config dict.
            Defaults to None.
    """

    def __init__(self,
                 temperature: float = 0.2,
                 loss: dict = dict(type='CrossEntropyLoss'),
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if temperature <= 0:
            raise ValueError('InfoNCEHead: `temperature` must be > 0, got '
                             f'{temperature}')
        self.temperature = temperature
        self.loss_module = MODELS.build(loss)

    def loss(
            self,
            pos: torch.Tensor,
            neg: torch.Tensor,
            neg_mask: Optional[torch.Tensor] = None
    ) -> Dict[str, torch.Tensor]:
        """Compute the InfoNCE loss and the contrastive accuracy.

        Args:
            pos (torch.Tensor): Positive similarities q.k+, shape (N, 1).
            neg (torch.Tensor): Negative similarities q.k_i, shape (N, K).
            neg_mask (torch.Tensor, optional): Bool (N, K), True for the
                negatives to leave out. Defaults to None.

        Returns:
            Dict[str, torch.Tensor]: ``loss`` and ``contrast_acc`` (percent,
            detached).
        """
        if neg_mask is not None:
            neg = neg.masked_fill(neg_mask, float('-inf'))
        # In place: one (N, K + 1) buffer fewer (autograd allows it, neither
        # cat nor the division needs its output or input for backward).
        logits = torch.cat((pos, neg), dim=1).div_(self.temperature)
        labels = torch.zeros(
            logits.shape[0], dtype=torch.long, device=logits.device)
        loss = self.loss_module(logits, labels)
        with torch.no_grad():
            # The positive wins when no negative scores higher; a tie counts
            # as a miss, as in the usual top-1 on logits.
            hits = neg.max(dim=1).values < pos.squeeze(1)
            acc = hits.float().mean() * 100
        return dict(loss=loss, contrast_acc=acc)

    def loss_against(
            self,
            query: torch.Tensor,
            key: torch.Tensor,
            negatives: torch.Tensor,
            neg_mask: Optional[torch.Tensor] = None
    ) -> Dict[str, torch.Tensor]:
        """The loss and accuracy of :meth:`loss` from the embeddings.

        With the default loss (mmpretrain's ``CrossEntropyLoss``, softmax,
        mean, no class weights; any ``loss_weight``) and keys that need no
        gradient, the fused computation is used; otherwise the similarities
        are formed and passed to :meth:`loss`.

        Args:
            query (torch.Tensor): L2-normalised queries (N, C).
            key (torch.Tensor): Their L2-normalised positive keys (N, C).
            negatives (torch.Tensor): The negative keys (M, C), e.g. the
                queue's buffer (read, never copied).
            neg_mask (torch.Tensor, optional): Bool (N, M), True for the
                negatives to leave out. Defaults to None.

        Returns:
            Dict[str, torch.Tensor]: ``loss`` and ``contrast_acc`` (percent,
            detached).
        """
        if self._fusable() and not (key.requires_grad
                                    or negatives.requires_grad):
            loss, hits = fused_info_nce(query, key, negatives,
                                        self.temperature, neg_mask)
            loss_weight = self.loss_module.loss_weight
            if loss_weight != 1:
                loss = loss * loss_weight
            return dict(loss=loss, contrast_acc=hits.float().mean() * 100)
        with torch.autocast(query.device.type, enabled=False):
            dtype = similarity_dtype(query, key, negatives)
            query = query.to(dtype)
            pos = (query * key.to(dtype)).sum(dim=1, keepdim=True)
            neg = query @ negatives.to(dtype).t()
        return self.loss(pos, neg, neg_mask)

    def forward(
            self,
            query: torch.Tensor,
            key: torch.Tensor,
            negatives: torch.Tensor,
            neg_mask: Optional[torch.Tensor] = None
    ) -> Dict[str, torch.Tensor]:
        """Same as :meth:`loss_against`."""
        return self.loss_against(query, key, negatives, neg_mask)

    def _fusable(self) -> bool:
        """Whether the loss config is the plain softmax cross-entropy that
        :func:`fused_info_nce` computes."""
        loss = self.loss_module
        return (type(loss) is CrossEntropyLoss and not loss.use_sigmoid
                and not loss.use_soft and loss.reduction == 'mean'
                and loss.class_weight is None)
