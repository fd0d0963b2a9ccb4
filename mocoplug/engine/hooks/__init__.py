# Copyright (c) mocoplug contributors. All rights reserved.
from .momentum_update_hook import MomentumUpdateHook

__all__ = ['MomentumUpdateHook']
