# Copyright (c) mocoplug contributors. All rights reserved.
from collections import defaultdict
from typing import Callable, Iterable, List, Optional, Tuple

import torch
from torch import Tensor
from torch.optim import Optimizer

from mocoplug.registry import OPTIMIZERS

BUFFER = 'mu'
UPDATE_KEYS = ('lr', 'momentum', 'weight_decay', 'eta', 'nesterov')


@OPTIMIZERS.register_module()
class MoCoV3LARS(Optimizer):
    """LARS as the MoCo v3 authors trained ResNet-50 with it.

    `An Empirical Study of Training Self-Supervised Vision Transformers
    <https://arxiv.org/abs/2104.02057>`_ (MoCo v3) trains its ResNet-50 with
    LARS (`You et al. <https://arxiv.org/abs/1708.03888>`_); this is the
    update of its ``moco/optimizer.py``: weights (``ndim > 1``) decayed and
    scaled by the trust ratio, 1-D parameters neither. How it differs from
    mmpretrain's ``LARS``: docs/design_notes.md. ``lars_exclude`` is
    refused on a weight; the step reads no tensor on the host.

    Args:
        params (Iterable): Parameters or parameter groups (dicts).
        lr (float): Learning rate.
        momentum (float): Momentum factor (the official 0.9).
        weight_decay (float): Weight decay of the weights.
        eta (float): Trust coefficient (the official ``trust_coefficient``).
        nesterov (bool): Nesterov momentum.
        foreach (bool, optional): Use the multi-tensor kernels; None: when
            every parameter is on a GPU.
    """

    def __init__(self,
                 params: Iterable,
                 lr: float,
                 momentum: float = 0.9,
                 weight_decay: float = 0.,
                 eta: float = 0.001,
                 nesterov: bool = False,
                 foreach: Optional[bool] = None) -> None:
        for name, value in (('lr', lr), ('momentum', momentum),
                            ('weight_decay', weight_decay), ('eta', eta)):
            if not value >= 0.:
                raise ValueError(
                    f'MoCoV3LARS: `{name}` must be >= 0, got {value!r}')
        if nesterov and momentum <= 0.:
            raise ValueError('MoCoV3LARS: `nesterov=True` needs a positive '
                             f'`momentum`, got {momentum!r}')
        defaults = zip(UPDATE_KEYS,
                       (lr, momentum, weight_decay, eta, nesterov))
        super().__init__(params, dict(defaults, foreach=foreach))

    def add_param_group(self, param_group: dict) -> None:
        """Add a group; refuse ``lars_exclude=True`` on a weight."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        if group.get('lars_exclude', False):
            weights = [tuple(p.shape) for p in group['params'] if p.ndim > 1]
            if weights:
                raise ValueError(
                    'MoCoV3LARS excludes by shape (ndim <= 1); '
                    f'lars_exclude=True on weights of shape {weights}. Drop '
                    "lars_exclude, or use mmpretrain's LARS.")

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state saved by this optimizer (refuses any other)."""
        for index, param_state in state_dict.get('state', {}).items():
            other = sorted(set(param_state) - {BUFFER})
            if other:
                raise ValueError(
                    f'MoCoV3LARS.load_state_dict: parameter {index} has '
                    f'{other}, saved by another optimizer. Resume with that '
                    'optimizer, or use load_from instead of resume.')
        super().load_state_dict(state_dict)

    @torch.no_grad()
    def step(self, closure: Optional[Callable] = None) -> Optional[Tensor]:
        """Perform one update; ``closure`` re-evaluates the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group['params'] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            buffers = []
            for p in params:
                state = self.state[p]
                if BUFFER not in state:
                    state[BUFFER] = torch.zeros_like(
                        p, memory_format=torch.preserve_format)
                buffers.append(state[BUFFER])
            foreach = group['foreach']
            if foreach is None:
                foreach = all(p.is_cuda for p in params)
            update = _foreach_update if foreach else _single_tensor_update
            for p, g, b in _by_device_and_dtype(params, grads, buffers):
                update(p, g, b, **{k: group[k] for k in UPDATE_KEYS})
        return loss


def _by_device_and_dtype(
    params: List[Tensor], grads: List[Tensor], buffers: List[Tensor]
) -> Iterable[Tuple[List[Tensor], List[Tensor], List[Tensor]]]:
    """Split the lists into runs of one device and dtype (one kernel each)."""
    runs = defaultdict(lambda: ([], [], []))
    for p, g, b in zip(params, grads, buffers):
        for run, tensor in zip(runs[(p.device, p.dtype)], (p, g, b)):
            run.append(tensor)
    return runs.values()


def _trust_ratio(param_norm: Tensor, update_norm: Tensor,
                 eta: float) -> Tensor:
    """eta ||p|| / ||d|| where both norms are positive, else 1 (on device)."""
    positive = (param_norm > 0) & (update_norm > 0)
    return torch.where(positive, eta * param_norm / update_norm, 1.)


def _single_tensor_update(params: List[Tensor], grads: List[Tensor],
                          buffers: List[Tensor], *, lr: float, momentum: float,
                          weight_decay: float, eta: float,
                          nesterov: bool) -> None:
    """The update, one parameter at a time."""
    for p, g, mu in zip(params, grads, buffers):
        d = g
        if p.ndim > 1:
            d = g.add(p, alpha=weight_decay)
            ratio = _trust_ratio(
                torch.linalg.vector_norm(p), torch.linalg.vector_norm(d), eta)
            d.mul_(ratio)
        mu.mul_(momentum).add_(d)
        p.add_(d.add(mu, alpha=momentum) if nesterov else mu, alpha=-lr)


def _foreach_update(params: List[Tensor], grads: List[Tensor],
                    buffers: List[Tensor], *, lr: float, momentum: float,
                    weight_decay: float, eta: float, nesterov: bool) -> None:
    """The same update with multi-tensor kernels (one device and dtype)."""
    weights = [i for i, p in enumerate(params) if p.ndim > 1]
    updates = list(grads)
    if weights:
        w_params = [params[i] for i in weights]
        w_updates = torch._foreach_add([grads[i] for i in weights],
                                       w_params,
                                       alpha=weight_decay)
        ratios = _trust_ratio(
            torch.stack(torch._foreach_norm(w_params)),
            torch.stack(torch._foreach_norm(w_updates)), eta)
        torch._foreach_mul_(w_updates, list(ratios.unbind(0)))
        for i, d in zip(weights, w_updates):
            updates[i] = d
    torch._foreach_mul_(buffers, momentum)
    torch._foreach_add_(buffers, updates)
    steps = buffers
    if nesterov:
        steps = torch._foreach_add(updates, buffers, alpha=momentum)
    torch._foreach_add_(params, steps, alpha=-lr)
