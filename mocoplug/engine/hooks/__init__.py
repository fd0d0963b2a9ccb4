# Copyright (c) mocoplug contributors. All rights reserved.
from .knn_monitor_hook import KNNMonitorHook
from .momentum_update_hook import MomentumUpdateHook

__all__ = ['KNNMonitorHook', 'MomentumUpdateHook']
