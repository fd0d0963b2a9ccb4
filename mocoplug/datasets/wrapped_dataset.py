# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Any, Optional

from mmengine.dataset import BaseDataset
from torch.utils.data import ConcatDataset


def unwrap_dataset(dataset: Any) -> Any:
    """The dataset under wrappers that hold one in ``.dataset``
    (``RepeatDataset``...); a ``BaseDataset`` or ``ConcatDataset`` as is."""
    for _ in range(8):
        if isinstance(dataset, (BaseDataset, ConcatDataset)) or \
                not hasattr(dataset, 'dataset'):
            break
        dataset = dataset.dataset
    return dataset


def dataset_transforms(dataset: Any) -> Optional[list]:
    """The transform list of the (unwrapped) dataset's pipeline; None when
    it has none."""
    pipeline = getattr(unwrap_dataset(dataset), 'pipeline', None)
    transforms = getattr(pipeline, 'transforms', None)
    return transforms if isinstance(transforms, list) else None
