# Runtime shared by mocoplug's configs: mmpretrain's, plus mocoplug's scope.
_base_ = 'mmpretrain::_base_/default_runtime.py'

# Look components up in mocoplug first, then mmpretrain, then mmengine.
default_scope = 'mocoplug'
# Registers mocoplug's components (and its checkpoint-loading fix).
custom_imports = dict(imports=['mocoplug'], allow_failed_imports=False)
# mocoplug's runner: gives `pretrained=`, `data_root=` and
# `default_hooks.NAME=None` their meaning, trains on CPUs with gloo, and
# leaves the process group at exit (mocoplug/engine/runner/moco_runner.py).
# Built by every tool that calls RUNNERS.build(cfg) (mocoplug's, mmpretrain's
# and mmdet's tools/train.py and tools/test.py, mim); scope-qualified so
# that it resolves before any default scope is set.
runner_type = 'mocoplug.MoCoRunner'

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
    moco_config_check=dict(type='MoCoConfigCheckHook'),
    # continued pretraining (model.encoders_from): the queue filled with
    # keys of this data before the first step
    queue_refill=dict(type='QueueRefillHook'))
