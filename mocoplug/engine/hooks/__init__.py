# Copyright (c) mocoplug contributors. All rights reserved.
from .knn_monitor_hook import KNNMonitorHook
from .momentum_update_hook import MomentumUpdateHook
from .representation_health_hook import RepresentationHealthHook

__all__ = ['KNNMonitorHook', 'MomentumUpdateHook', 'RepresentationHealthHook']
