# Copyright (c) mocoplug contributors. All rights reserved.
from .moco_projection_neck import MoCoProjectionNeck

__all__ = ['MoCoProjectionNeck']
