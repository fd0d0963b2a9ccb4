# Copyright (c) mocoplug contributors. All rights reserved.
from .base_momentum import BaseMomentumSelfSupervisor
from .moco import MoCo

__all__ = ['BaseMomentumSelfSupervisor', 'MoCo']
