# Copyright (c) mocoplug contributors. All rights reserved.
"""Refuse to resume from a checkpoint whose model state does not fit.

mmengine 0.10.7's ``Runner.resume`` loads with ``strict=False`` and only
warns about tensors that do not fit; a resume continues the run that wrote
the checkpoint, so here any such tensor is an error. ``load_from`` without
``resume`` keeps mmengine's non-strict load.
"""
import re
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Sequence, Tuple

import torch
import torch.nn as nn
from mmpretrain.utils import get_ori_model

# Runner.load_checkpoint's default revise_keys, which Runner.resume uses
RESUME_REVISE_KEYS: Sequence[Tuple[str, str]] = ((r'^module.', ''), )
# tensors listed per kind of mismatch (then the count of the rest)
MAX_LISTED = 20
Shape = Tuple[int, ...]


class ResumeMismatchError(RuntimeError):
    """The checkpoint's model state does not fit the model to resume."""


@dataclass
class StateDictMismatch:
    """Where a checkpoint's state dict and a model's differ: ``shapes``
    ``(name, checkpoint shape, model shape)``, ``missing`` (from the
    checkpoint) and ``unexpected`` (not in the model) names."""
    shapes: List[Tuple[str, Shape, Shape]] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.shapes or self.missing or self.unexpected)


def compare_state_dict(model: nn.Module,
                       state_dict: Mapping[str, Any]) -> StateDictMismatch:
    """Compare a state dict (keys revised) with the unwrapped model's own;
    empty (falsy) when every tensor fits. As mmengine, a missing
    ``num_batches_tracked`` is not reported; shapes are not compared for
    lazy parameters, non-tensors and a module's ``variable_size_state``."""
    expected = model.state_dict()
    variable_size = {
        f'{prefix}.{key}' if prefix else key
        for prefix, module in model.named_modules()
        for key in getattr(module, 'variable_size_state', ())
    }
    result = StateDictMismatch()
    for name, value in expected.items():
        if name not in state_dict:
            if not name.endswith('num_batches_tracked'):
                result.missing.append(name)
            continue
        loaded = state_dict[name]
        if not (torch.is_tensor(value) and torch.is_tensor(loaded)):
            continue
        if nn.parameter.is_lazy(value) or name in variable_size:
            continue
        if loaded.shape != value.shape:
            result.shapes.append(
                (name, tuple(loaded.shape), tuple(value.shape)))
    result.unexpected = [k for k in state_dict if k not in expected]
    return result


def _listing(title: str, lines: List[str]) -> List[str]:
    shown = [f'    {line}' for line in lines[:MAX_LISTED]]
    if len(lines) > MAX_LISTED:
        shown.append(f'    ... and {len(lines) - MAX_LISTED} more')
    return [f'  {title} ({len(lines)}):'] + shown


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
            lines += _listing(title, names)
    return '\n'.join(lines)


def check_resume_fits(
        model: nn.Module,
        checkpoint: Mapping[str, Any],
        revise_keys: Sequence[Tuple[str, str]] = RESUME_REVISE_KEYS) -> None:
    """Raise :class:`ResumeMismatchError`, listing the tensors and the fix,
    unless every model tensor of the checkpoint (its ``state_dict`` entry,
    or the whole mapping) loads into ``model`` (possibly wrapped) after the
    key renames ``revise_keys``."""
    state_dict = dict(checkpoint.get('state_dict', checkpoint))
    for pattern, replacement in revise_keys:  # as mmengine's loader
        state_dict = {
            re.sub(pattern, replacement, k): v
            for k, v in state_dict.items()
        }
    mismatch = compare_state_dict(get_ori_model(model), state_dict)
    if not mismatch:
        return
    raise ResumeMismatchError(
        'Cannot resume: the checkpoint\'s model state does not fit this '
        'model (mmengine would load it with strict=False and train on with '
        'these tensors as initialised):\n' + format_mismatch(mismatch) +
        '\nResume with the config the checkpoint was written with (a copy '
        'is the text of the checkpoint\'s meta["cfg"]). For a deliberate '
        'partial start from these weights, use load_from=CHECKPOINT '
        'without resume (or --cfg-options load_from=CHECKPOINT instead of '
        '--resume): it loads the tensors that fit, lists the others and '
        'starts a new run at iteration 0.')
