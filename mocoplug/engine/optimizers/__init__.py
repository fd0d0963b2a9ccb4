# Copyright (c) mocoplug contributors. All rights reserved.
from .bf16_optim_wrapper import BF16OptimWrapper
from .lars_optim_wrapper_constructor import LARSOptimWrapperConstructor

__all__ = ['BF16OptimWrapper', 'LARSOptimWrapperConstructor']
