# Copyright (c) mocoplug contributors. All rights reserved.
from .folder_linear_cls_head import FolderLinearClsHead
from .info_nce_head import InfoNCEHead

__all__ = ['FolderLinearClsHead', 'InfoNCEHead']
