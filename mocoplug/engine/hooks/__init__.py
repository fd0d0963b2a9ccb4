# Copyright (c) mocoplug contributors. All rights reserved.
from .knn_monitor_hook import KNNMonitorHook
from .momentum_update_hook import MomentumUpdateHook
from .non_finite_loss_hook import NonFiniteLossError, NonFiniteLossHook

__all__ = [
    'KNNMonitorHook', 'MomentumUpdateHook', 'NonFiniteLossError',
    'NonFiniteLossHook'
]
