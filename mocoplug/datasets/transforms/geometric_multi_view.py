# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List, Union

from mmpretrain.datasets.transforms import MultiView

from mocoplug.registry import TRANSFORMS
from .view_pipeline_split import split_view_pipeline


@TRANSFORMS.register_module()
class GeometricMultiView(MultiView):
    """mmpretrain's ``MultiView`` running only the geometric steps of each
    view pipeline: the worker half of the device augmentation path.

    Takes the same ``transforms`` and ``num_views`` as ``MultiView`` (the
    recipe's own view pipelines) and runs, per view, the steps that
    :func:`~mocoplug.datasets.transforms.view_pipeline_split.
    split_view_pipeline` gives the workers (crop, resize, flip, affine); the
    photometric steps (colour jitter, grayscale, blur, solarize) are left to
    :class:`~mocoplug.models.DeviceAugmentDataPreprocessor`, configured with
    the same pipelines. The views stay uint8, as ``MultiView``'s.

    Required keys: ``img``. Modified keys: ``img`` (a list of views).

    Args:
        transforms (list[list[dict]]): View pipelines, as ``MultiView``.
        num_views (int | list[int]): Views per pipeline, as ``MultiView``.
    """

    def __init__(self, transforms: List[List[dict]],
                 num_views: Union[int, List[int]]) -> None:
        geometric = [split_view_pipeline(p)[0] for p in transforms]
        super().__init__(geometric, num_views)
