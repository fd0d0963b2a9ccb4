# Copyright (c) mocoplug contributors. All rights reserved.
from .exact_resume_hook import ExactResumeHook
from .knn_monitor_hook import KNNMonitorHook
from .moco_config_check_hook import MoCoConfigCheckHook
from .momentum_update_hook import MomentumUpdateHook
from .non_finite_loss_hook import NonFiniteLossError, NonFiniteLossHook
from .queue_refill_hook import QueueRefillHook
from .representation_health_hook import RepresentationHealthHook

__all__ = [
    'ExactResumeHook', 'KNNMonitorHook', 'MoCoConfigCheckHook',
    'MomentumUpdateHook', 'NonFiniteLossError', 'NonFiniteLossHook',
    'QueueRefillHook', 'RepresentationHealthHook'
]
