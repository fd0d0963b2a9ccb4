# Copyright (c) mocoplug contributors. All rights reserved.
from mmpretrain.models.heads import LinearClsHead

from mocoplug.registry import MODELS


@MODELS.register_module()
class FolderLinearClsHead(LinearClsHead):
    """mmpretrain's ``LinearClsHead`` (its arguments) whose ``num_classes``,
    None in ``*_folder`` configs, :class:`~mocoplug.engine.runner.MoCoRunner`
    fills from ``data_root``'s class folders; None raises how to fix it."""

    def __init__(self, num_classes, in_channels, **kwargs) -> None:
        if num_classes is None:
            raise ValueError(
                'model.head.num_classes is None: this config takes the '
                'number of classes from the class folders of `data_root`, '
                "which its runner_type (mocoplug.MoCoRunner) fills in. Build "
                "the runner with mmengine's RUNNERS.build(cfg) (as "
                'tools/train.py and tools/test.py do), not Runner.from_cfg, '
                'and set data_root (--cfg-options data_root=/path/to/folder); '
                'or set model.head.num_classes yourself.')
        super().__init__(num_classes, in_channels, **kwargs)
