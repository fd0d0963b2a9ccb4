# Copyright (c) mocoplug contributors. All rights reserved.
from .lars_optim_wrapper_constructor import LARSOptimWrapperConstructor

__all__ = ['LARSOptimWrapperConstructor']
