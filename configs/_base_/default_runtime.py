# Runtime shared by mocoplug's configs: mmpretrain's, plus mocoplug's scope.
_base_ = 'mmpretrain::_base_/default_runtime.py'

# Look components up in mocoplug first, then mmpretrain, then mmengine.
default_scope = 'mocoplug'
# Registers mocoplug's components (and its checkpoint-loading fix).
custom_imports = dict(imports=['mocoplug'], allow_failed_imports=False)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    # exact_resume: checkpoints carry the random state, so `--resume`
    # continues bit-identically (mocoplug/engine/hooks/exact_resume_hook.py).
    exact_resume=dict(type='ExactResumeHook'),
    # embedding std, alignment/uniformity, pos/neg similarity, queue age,
    # key-query distance on the logged iterations; warns on collapse. Does
    # nothing for models without a momentum encoder (linear benchmarks).
    representation_health=dict(type='RepresentationHealthHook'),
    # stop at the first NaN/inf loss; never save non-finite weights
    non_finite_loss=dict(type='NonFiniteLossHook'),
    # MoCo setup vs the dataloader/GPUs, checked before any data is loaded
    moco_config_check=dict(type='MoCoConfigCheckHook'))
