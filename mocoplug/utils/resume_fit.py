# Copyright (c) mocoplug contributors. All rights reserved.
"""Refuse to resume from a checkpoint whose model state does not fit
(mmengine 0.10.7's ``Runner.resume`` only warns)."""
import re
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Sequence, Tuple

import torch
import torch.nn as nn
from mmpretrain.utils import get_ori_model

from mocoplug.models.utils.encoder_checkpoint import variable_size_state

RESUME_REVISE_KEYS: Sequence[Tuple[str, str]] = ((r'^module.', ''), )
MAX_LISTED = 20  # tensors listed per kind of mismatch
Shape = Tuple[int, ...]


class ResumeMismatchError(RuntimeError):
    """The checkpoint's model state does not fit the model to resume."""


@dataclass
class StateDictMismatch:
    """``shapes`` ``(name, checkpoint shape, model shape)``, ``missing``
    and ``unexpected`` names of a checkpoint's state dict."""
    shapes: List[Tuple[str, Shape, Shape]] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.shapes or self.missing or self.unexpected)


def compare_state_dict(model: nn.Module,
                       state_dict: Mapping[str, Any]) -> StateDictMismatch:
    """Compare a state dict with the unwrapped model's; falsy when it fits
    (as mmengine, ``num_batches_tracked`` may be missing; lazy, non-tensor
    and ``variable_size_state`` entries are not compared)."""
    expected = model.state_dict()
    variable_size = variable_size_state(model)
    result = StateDictMismatch()
    for name, value in expected.items():
        if name not in state_dict:
            if not name.endswith('num_batches_tracked'):
                result.missing.append(name)
            continue
        loaded = state_dict[name]
        if not (torch.is_tensor(value) and torch.is_tensor(loaded)) or \
                nn.parameter.is_lazy(value) or name in variable_size:
            continue
        if loaded.shape != value.shape:
            result.shapes.append(
                (name, tuple(loaded.shape), tuple(value.shape)))
    result.unexpected = [k for k in state_dict if k not in expected]
    return result


def format_mismatch(mismatch: StateDictMismatch) -> str:
    """The tensors that do not fit, one per line, by kind."""
    shapes = [
        f'{name}: {list(saved)} vs {list(model)}'
        for name, saved, model in mismatch.shapes
    ]
    lines: List[str] = []
    for title, names in (('another shape (checkpoint vs model)', shapes),
                         ('missing from the checkpoint', mismatch.missing),
                         ('in the checkpoint but not in the model',
                          mismatch.unexpected)):
        if names:
            lines.append(f'  {title} ({len(names)}):')
            lines += [f'    {name}' for name in names[:MAX_LISTED]]
            if len(names) > MAX_LISTED:
                lines.append(f'    ... and {len(names) - MAX_LISTED} more')
    return '\n'.join(lines)


def revised_state(
    checkpoint: Mapping[str, Any],
    revise_keys: Sequence[Tuple[str, str]] = RESUME_REVISE_KEYS
) -> Mapping[str, Any]:
    """The checkpoint's model state, keys revised as mmengine's loader."""
    state_dict = dict(checkpoint.get('state_dict', checkpoint))
    for pattern, repl in revise_keys:
        state_dict = {
            re.sub(pattern, repl, k): v
            for k, v in state_dict.items()
        }
    return state_dict


def check_resume_fits(
        model: nn.Module,
        checkpoint: Mapping[str, Any],
        revise_keys: Sequence[Tuple[str, str]] = RESUME_REVISE_KEYS) -> None:
    """Raise :class:`ResumeMismatchError` unless the checkpoint's model
    state (``state_dict`` or the mapping), keys revised, fits ``model``."""
    mismatch = compare_state_dict(
        get_ori_model(model), revised_state(checkpoint, revise_keys))
    if not mismatch:
        return
    raise ResumeMismatchError(
        'Cannot resume: the checkpoint\'s model state does not fit this '
        'model:\n' + format_mismatch(mismatch) +
        '\nResume with the config the checkpoint was written with (a copy '
        'is the text of the checkpoint\'s meta["cfg"]). For a new run from '
        'these weights: a MoCo model takes model.encoders_from=CHECKPOINT '
        '(both encoders, the queue refilled); another model\'s backbone '
        'pretrained=CHECKPOINT (its init_cfg states a partial start: '
        'keep_init, unread).')


def check_load_from_fits(model: nn.Module, checkpoint: Mapping[str, Any],
                         path: str) -> None:
    """``load_from`` without resume: raise :class:`ResumeMismatchError`
    when a tensor of the model would not load (missing, another shape), so
    that part of it would keep its random init (a momentum model: the key
    encoder or the queue; tensors the model lacks are harmless)."""
    model = get_ori_model(model)
    mismatch = compare_state_dict(model, revised_state(checkpoint))
    mismatch.unexpected = []
    variable_size = variable_size_state(model)  # a generator: seeded anew
    mismatch.missing = [k for k in mismatch.missing if k not in variable_size]
    if not mismatch:
        return
    if hasattr(model, 'momentum_pairs'):
        why = ('The query encoder would load while the momentum (key) '
               'encoder or the queue keep their random init. To start from '
               'released MoCo weights (mmpretrain, mmselfsup, official, '
               'torchvision) use model.encoders_from=PATH instead: it starts '
               'both encoders and refills the queue')
    else:
        why = ('Those tensors would keep their random init. To start a '
               "backbone from a pretraining checkpoint use pretrained=PATH "
               "(every tensor of the backbone, the known layouts; "
               'init_cfg.keep_init / unread state a partial start)')
    raise ResumeMismatchError(
        f'load_from={path!r} does not fit this {type(model).__name__}:\n' +
        format_mismatch(mismatch) + f'\n{why}; load_from takes a checkpoint '
        'of this very model.')
