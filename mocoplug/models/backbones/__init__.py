# Copyright (c) mocoplug contributors. All rights reserved.
from .small_conv_net import SmallConvNet

__all__ = ['SmallConvNet']
