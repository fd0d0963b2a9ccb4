# Copyright (c) mocoplug contributors. All rights reserved.
from mmpretrain.models.heads import LinearClsHead

from mocoplug.registry import MODELS


@MODELS.register_module()
class FolderLinearClsHead(LinearClsHead):
    """mmpretrain's ``LinearClsHead`` for evaluation on a labelled folder,
    whose number of classes is that of the folder's class sub-folders.

    The ``*_folder`` evaluation configs leave ``num_classes`` None for
    :class:`~mocoplug.engine.runner.MoCoRunner` to fill from ``data_root``
    (:func:`mocoplug.datasets.fill_data_root`). Built with None, i.e. by a
    runner that is not the config's, it says how to build it instead of
    failing inside mmpretrain. Arguments: as ``LinearClsHead``.
    """

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
