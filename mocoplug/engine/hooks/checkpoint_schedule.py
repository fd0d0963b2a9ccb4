# Copyright (c) mocoplug contributors. All rights reserved.
"""When mmengine's ``CheckpointHook`` is about to save.

``ExactResumeHook`` (snapshot the random state) and ``NonFiniteLossHook``
(check the weights) must act *before* ``CheckpointHook`` writes, and only
when it writes; mmengine does not expose that decision, so it is computed
here with ``CheckpointHook``'s own tests (interval, ``save_begin``,
``save_last``).
"""
from mmengine.hooks import CheckpointHook
from mmengine.runner import Runner


def checkpoint_due(runner: Runner, by_epoch: bool) -> bool:
    """Whether a ``CheckpointHook`` of the runner saves at the end of this
    epoch (``by_epoch=True``, called in ``after_train_epoch``) or of this
    iteration (``by_epoch=False``, called in ``after_train_iter``).

    Args:
        runner (Runner): The runner.
        by_epoch (bool): Which kind of save to test for.

    Returns:
        bool: True if some ``CheckpointHook`` will save now.
    """
    for hook in runner.hooks:
        if not isinstance(hook, CheckpointHook) or hook.by_epoch != by_epoch:
            continue
        if by_epoch:
            periodic = hook.every_n_epochs(runner, hook.interval,
                                           hook.save_begin)
            last = hook.is_last_train_epoch(runner)
        else:
            periodic = hook.every_n_train_iters(runner, hook.interval,
                                                hook.save_begin)
            last = hook.is_last_train_iter(runner)
        if periodic or (hook.save_last and last):
            return True
    return False
