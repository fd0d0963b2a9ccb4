# Copyright (c) mocoplug contributors. All rights reserved.
from .moco_runner import MoCoRunner

__all__ = ['MoCoRunner']
