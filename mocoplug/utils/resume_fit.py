# Copyright (c) mocoplug contributors. All rights reserved.
"""Refuse to resume from a checkpoint whose model state does not fit.

mmengine 0.10.7's ``Runner.resume`` loads the model with ``strict=False``:
a tensor of another shape, a tensor the checkpoint lacks or one the model
lacks is reported in a warning and training goes on with those tensors as
initialised (e.g. a fresh random MoCo queue after resuming with another
``model.queue.size``). A resume is meant to continue the very run that
wrote the checkpoint, so here any such tensor is an error, raised before
the first training iteration, that lists the tensors and the way out.

``load_from`` without ``resume`` (fine-tuning, a deliberate partial start)
and ``Pretrained`` initialisation are not checked here: they keep mmengine's
non-strict load and its report.
"""
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import torch
import torch.nn as nn
from mmpretrain.utils import get_ori_model

# What Runner.resume loads with: Runner.load_checkpoint's default
# ``revise_keys`` (a DDP checkpoint's 'module.' prefix is stripped).
RESUME_REVISE_KEYS: Sequence[Tuple[str, str]] = ((r'^module.', ''), )
# Each kind of mismatch lists at most this many tensors (and the count of
# the rest): a different backbone would otherwise print hundreds of lines.
MAX_LISTED = 20
Shape = Tuple[int, ...]


class ResumeMismatchError(RuntimeError):
    """The checkpoint's model state does not fit the model to resume."""


@dataclass
class StateDictMismatch:
    """Where a checkpoint's state dict and a model's differ.

    Attributes:
        shapes (list): ``(name, checkpoint shape, model shape)`` of the
            tensors both have with different shapes.
        missing (list): Names the model has and the checkpoint lacks.
        unexpected (list): Names the checkpoint has and the model lacks.
    """
    shapes: List[Tuple[str, Shape, Shape]] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.shapes or self.missing or self.unexpected)


def revise_state_dict_keys(
        state_dict: Mapping[str, Any],
        revise_keys: Sequence[Tuple[str, str]]) -> Dict[str, Any]:
    """Rename the keys as mmengine's ``_load_checkpoint_to_model`` does:
    every ``(pattern, replacement)`` applied with ``re.sub`` in order."""
    out = dict(state_dict)
    for pattern, replacement in revise_keys:
        out = {re.sub(pattern, replacement, k): v for k, v in out.items()}
    return out


def compare_state_dict(model: nn.Module,
                       state_dict: Mapping[str, Any]) -> StateDictMismatch:
    """Compare a state dict with what ``model.load_state_dict`` expects.

    The model's own ``state_dict()`` gives the expected names and shapes
    (parameters, persistent buffers, extra state). As in mmengine's
    ``load_state_dict``, a missing ``num_batches_tracked`` is not reported
    (BatchNorm fills it in for checkpoints older than torch 0.4.1). Shapes
    are not compared for lazy (uninitialised) parameters, non-tensor
    entries and the tensors a module names in its ``variable_size_state``
    (e.g. a random generator's state, whose size depends on the device).

    Args:
        model (nn.Module): The model, unwrapped.
        state_dict (Mapping): Checkpoint state, keys already revised.

    Returns:
        StateDictMismatch: Empty (falsy) when every tensor fits.
    """
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
    lines: List[str] = []
    if mismatch.shapes:
        lines += _listing('another shape (checkpoint vs model)', [
            f'{name}: {list(saved)} vs {list(model)}'
            for name, saved, model in mismatch.shapes
        ])
    if mismatch.missing:
        lines += _listing('missing from the checkpoint', mismatch.missing)
    if mismatch.unexpected:
        lines += _listing('in the checkpoint but not in the model',
                          mismatch.unexpected)
    return '\n'.join(lines)


def check_resume_fits(
        model: nn.Module,
        checkpoint: Mapping[str, Any],
        revise_keys: Sequence[Tuple[str, str]] = RESUME_REVISE_KEYS) -> None:
    """Raise unless every model tensor of the checkpoint loads into model.

    Args:
        model (nn.Module): The model to resume, possibly wrapped (DDP).
        checkpoint (Mapping): The loaded checkpoint; its ``state_dict``
            entry, or the whole mapping when it has none (mmengine's rule).
        revise_keys (Sequence): Key renames applied before comparing;
            defaults to what ``Runner.resume`` uses.

    Raises:
        ResumeMismatchError: Listing the tensors of another shape, missing
            or unexpected, and the fix.
    """
    state_dict = checkpoint.get('state_dict', checkpoint)
    state_dict = revise_state_dict_keys(state_dict, revise_keys)
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
