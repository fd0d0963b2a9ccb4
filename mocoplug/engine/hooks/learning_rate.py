# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Optional

from mmengine.runner import Runner


def current_lrs(runner: Runner) -> Optional[str]:
    """The lr of this iteration, of every param group if they differ, e.g.
    ``'lr 0.03'``; read from the param groups (Python floats).

    Args:
        runner (Runner): The runner.

    Returns:
        str, optional: The lrs, or None when the runner has no optimizer.
    """
    try:
        lrs = runner.optim_wrapper.get_lr()
    except Exception:  # no optimizer: the caller says so rather than fail
        return None
    parts = []
    for name, groups in lrs.items():
        shown = sorted(set(groups), key=groups.index)
        parts.append(f'{name} ' + ', '.join(f'{x:.6g}' for x in shown))
    return '; '.join(parts) or None
