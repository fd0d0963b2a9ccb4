# Copyright (c) mocoplug contributors. All rights reserved.
"""Let ``default_hooks.NAME=None`` switch off mocoplug's default hooks
(mmengine 0.10.7 accepts None only for its own)."""
from typing import Dict

# The names Runner.register_default_hooks knows (mmengine 0.10.7).
MMENGINE_DEFAULT_HOOKS = ('runtime_info', 'timer', 'sampler_seed', 'logger',
                          'param_scheduler', 'checkpoint')


def enabled_default_hooks(hooks: Dict) -> Dict:
    """A copy of ``hooks`` (a config's ``default_hooks``) without the None
    entries mmengine would refuse (its own names are left to it)."""
    return {
        name: hook
        for name, hook in hooks.items()
        if hook is not None or name in MMENGINE_DEFAULT_HOOKS
    }
