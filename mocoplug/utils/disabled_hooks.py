# Copyright (c) mocoplug contributors. All rights reserved.
"""Let ``default_hooks.NAME=None`` switch off mocoplug's default hooks.

mmengine 0.10.7's ``Runner.register_default_hooks`` accepts ``None`` only
for its own default names (``timer``, ``logger``, ``checkpoint`` ...) and
fails on an ``assert`` for any other key, so a user could not turn off
``exact_resume``, ``representation_health``, ``non_finite_loss`` or
``moco_config_check`` the way mmengine documents for its own hooks.
:func:`drop_disabled_default_hooks`, called by ``tools/train.py`` and
``tools/test.py`` after ``--cfg-options`` are merged, removes those keys
(mmengine's own names are left for mmengine to handle).
"""
from typing import List

from mmengine.config import Config

# The names Runner.register_default_hooks knows (mmengine 0.10.7).
MMENGINE_DEFAULT_HOOKS = ('runtime_info', 'timer', 'sampler_seed', 'logger',
                          'param_scheduler', 'checkpoint')


def drop_disabled_default_hooks(cfg: Config) -> List[str]:
    """Remove ``default_hooks`` entries set to None that mmengine would
    refuse.

    Args:
        cfg (Config): The config; changed in place.

    Returns:
        List[str]: The names removed.
    """
    hooks = cfg.get('default_hooks', None)
    if not hooks:
        return []
    dropped = [
        name for name, hook in hooks.items()
        if hook is None and name not in MMENGINE_DEFAULT_HOOKS
    ]
    for name in dropped:
        hooks.pop(name)
    return dropped
