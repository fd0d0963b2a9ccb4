# Copyright (c) mocoplug contributors. All rights reserved.
from .exact_resume_hook import ExactResumeHook
from .knn_monitor_hook import KNNMonitorHook
from .momentum_update_hook import MomentumUpdateHook

__all__ = ['ExactResumeHook', 'KNNMonitorHook', 'MomentumUpdateHook']
