# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug's registries: children of mmpretrain's (``RUNNERS``: of
mmengine's), so ``default_scope = 'mocoplug'`` reaches theirs too."""
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import Registry
from mmpretrain import registry as mmpretrain_registry

_ENGINE = ['mocoplug.engine']
_MODELS = ['mocoplug.models']
_DATASETS = ['mocoplug.datasets']


def _child(name: str, parent: Registry, locations: list) -> Registry:
    return Registry(
        name,
        parent=parent,
        scope='mocoplug',
        locations=locations + list(parent._locations))


# the tools build the runner from mmengine's root before any default scope
RUNNERS = _child('runner', MMENGINE_RUNNERS, _ENGINE)
RUNNER_CONSTRUCTORS = _child('runner constructor',
                             mmpretrain_registry.RUNNER_CONSTRUCTORS, _ENGINE)
LOOPS = _child('loop', mmpretrain_registry.LOOPS, _ENGINE)
HOOKS = _child('hook', mmpretrain_registry.HOOKS, _ENGINE)
LOG_PROCESSORS = _child('log processor', mmpretrain_registry.LOG_PROCESSORS,
                        _ENGINE)
OPTIMIZERS = _child('optimizer', mmpretrain_registry.OPTIMIZERS, _ENGINE)
OPTIM_WRAPPERS = _child('optim_wrapper', mmpretrain_registry.OPTIM_WRAPPERS,
                        _ENGINE)
OPTIM_WRAPPER_CONSTRUCTORS = _child(
    'optimizer wrapper constructor',
    mmpretrain_registry.OPTIM_WRAPPER_CONSTRUCTORS, _ENGINE)
PARAM_SCHEDULERS = _child('parameter scheduler',
                          mmpretrain_registry.PARAM_SCHEDULERS, _ENGINE)

DATASETS = _child('dataset', mmpretrain_registry.DATASETS, _DATASETS)
DATA_SAMPLERS = _child('data sampler', mmpretrain_registry.DATA_SAMPLERS,
                       _DATASETS)
TRANSFORMS = _child('transform', mmpretrain_registry.TRANSFORMS, _DATASETS)

MODELS = _child('model', mmpretrain_registry.MODELS, _MODELS)
MODEL_WRAPPERS = _child('model_wrapper', mmpretrain_registry.MODEL_WRAPPERS,
                        _MODELS)
WEIGHT_INITIALIZERS = _child('weight initializer',
                             mmpretrain_registry.WEIGHT_INITIALIZERS, _MODELS)
BATCH_AUGMENTS = _child('batch augment', mmpretrain_registry.BATCH_AUGMENTS,
                        _MODELS)
TASK_UTILS = _child('task util', mmpretrain_registry.TASK_UTILS, _MODELS)
TOKENIZER = _child('tokenizer', mmpretrain_registry.TOKENIZER, _MODELS)

METRICS = _child('metric', mmpretrain_registry.METRICS, [])
EVALUATORS = _child('evaluator', mmpretrain_registry.EVALUATORS, [])

VISUALIZERS = _child('visualizer', mmpretrain_registry.VISUALIZERS, [])
VISBACKENDS = _child('vis_backend', mmpretrain_registry.VISBACKENDS, [])
