# Copyright (c) mocoplug contributors. All rights reserved.
from .bf16_optim_wrapper import BF16OptimWrapper
from .lars_optim_wrapper_constructor import LARSOptimWrapperConstructor
from .mocov3_lars import MoCoV3LARS

__all__ = ['BF16OptimWrapper', 'LARSOptimWrapperConstructor', 'MoCoV3LARS']
