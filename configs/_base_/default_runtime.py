# Runtime shared by mocoplug's configs: mmpretrain's, plus mocoplug's scope.
_base_ = 'mmpretrain::_base_/default_runtime.py'

# Look components up in mocoplug first, then mmpretrain, then mmengine.
default_scope = 'mocoplug'
# Registers mocoplug's components (and its checkpoint-loading fix).
custom_imports = dict(imports=['mocoplug'], allow_failed_imports=False)

# exact_resume: checkpoints carry the random state, so `--resume` continues
# bit-identically (mocoplug/engine/hooks/exact_resume_hook.py).
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    exact_resume=dict(type='ExactResumeHook'))
