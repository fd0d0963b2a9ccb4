# Copyright (c) mocoplug contributors. All rights reserved.
"""Let ``default_hooks.NAME=None`` switch off mocoplug's default hooks.

mmengine 0.10.7's ``Runner.register_default_hooks`` accepts ``None`` only
for its own default names (``timer``, ``logger``, ``checkpoint`` ...) and
fails on a bare ``assert`` for any other key, so a user could not turn off
``exact_resume``, ``representation_health``, ``non_finite_loss`` or
``moco_config_check`` the way mmengine documents for its own hooks.
``MoCoRunner`` (the ``runner_type`` of mocoplug's configs) registers
:func:`enabled_default_hooks` of the config's ``default_hooks`` instead.
"""
from typing import Dict

# The names Runner.register_default_hooks knows (mmengine 0.10.7).
MMENGINE_DEFAULT_HOOKS = ('runtime_info', 'timer', 'sampler_seed', 'logger',
                          'param_scheduler', 'checkpoint')


def enabled_default_hooks(hooks: Dict) -> Dict:
    """``default_hooks`` without the entries set to None that mmengine
    would refuse (mmengine's own names are left for mmengine to remove).

    Args:
        hooks (dict): The ``default_hooks`` of a config: name -> hook,
            hook config or None.

    Returns:
        dict: A new dict, in the same order.
    """
    return {
        name: hook
        for name, hook in hooks.items()
        if hook is not None or name in MMENGINE_DEFAULT_HOOKS
    }
