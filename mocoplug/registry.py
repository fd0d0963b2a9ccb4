# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug's registries: children of mmpretrain's (``RUNNERS``: of
mmengine's), so ``default_scope = 'mocoplug'`` reaches theirs too."""
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import Registry
from mmpretrain import registry as mmp

_ENGINE = ['mocoplug.engine']
_MODELS = ['mocoplug.models']
_DATASETS = ['mocoplug.datasets']


def _child(name: str, parent: Registry, locations: list) -> Registry:
    return Registry(
        name,
        parent=parent,
        scope='mocoplug',
        locations=locations + list(parent._locations))


RUNNERS = _child('runner', MMENGINE_RUNNERS, _ENGINE)
RUNNER_CONSTRUCTORS = _child('runner constructor', mmp.RUNNER_CONSTRUCTORS,
                             _ENGINE)
LOOPS = _child('loop', mmp.LOOPS, _ENGINE)
HOOKS = _child('hook', mmp.HOOKS, _ENGINE)
LOG_PROCESSORS = _child('log processor', mmp.LOG_PROCESSORS, _ENGINE)
OPTIMIZERS = _child('optimizer', mmp.OPTIMIZERS, _ENGINE)
OPTIM_WRAPPERS = _child('optim_wrapper', mmp.OPTIM_WRAPPERS, _ENGINE)
OPTIM_WRAPPER_CONSTRUCTORS = _child('optimizer wrapper constructor',
                                    mmp.OPTIM_WRAPPER_CONSTRUCTORS, _ENGINE)
PARAM_SCHEDULERS = _child('parameter scheduler', mmp.PARAM_SCHEDULERS, _ENGINE)

DATASETS = _child('dataset', mmp.DATASETS, _DATASETS)
DATA_SAMPLERS = _child('data sampler', mmp.DATA_SAMPLERS, _DATASETS)
TRANSFORMS = _child('transform', mmp.TRANSFORMS, _DATASETS)

MODELS = _child('model', mmp.MODELS, _MODELS)
MODEL_WRAPPERS = _child('model_wrapper', mmp.MODEL_WRAPPERS, _MODELS)
WEIGHT_INITIALIZERS = _child('weight initializer', mmp.WEIGHT_INITIALIZERS,
                             _MODELS)
BATCH_AUGMENTS = _child('batch augment', mmp.BATCH_AUGMENTS, _MODELS)
TASK_UTILS = _child('task util', mmp.TASK_UTILS, _MODELS)
TOKENIZER = _child('tokenizer', mmp.TOKENIZER, _MODELS)

METRICS = _child('metric', mmp.METRICS, [])
EVALUATORS = _child('evaluator', mmp.EVALUATORS, [])

VISUALIZERS = _child('visualizer', mmp.VISUALIZERS, [])
VISBACKENDS = _child('vis_backend', mmp.VISBACKENDS, [])
