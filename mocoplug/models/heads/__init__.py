# Copyright (c) mocoplug contributors. All rights reserved.
from .info_nce_head import InfoNCEHead

__all__ = ['InfoNCEHead']
