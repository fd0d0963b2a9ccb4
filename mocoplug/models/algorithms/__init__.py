# Copyright (c) mocoplug contributors. All rights reserved.
from .base_momentum import BaseMomentumSelfSupervisor
from .moco import MoCo
from .mocov3 import MoCoV3

__all__ = ['BaseMomentumSelfSupervisor', 'MoCo', 'MoCoV3']
