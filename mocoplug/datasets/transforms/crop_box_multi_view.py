# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List, Union

import numpy as np
from mmcv.transforms import BaseTransform

from mocoplug.registry import TRANSFORMS
from .view_pipeline_split import (repeat_per_view, split_view_pipeline,
                                  transform_name)


def _single_view_geometry(pipeline: List[dict]):
    """The RandomResizedCrop and optional horizontal RandomFlip of a view
    pipeline, built; any other geometric step is refused."""
    worker, _ = split_view_pipeline(pipeline)
    names = [transform_name(t) for t in worker]
    if names not in (['RandomResizedCrop'],
                     ['RandomResizedCrop', 'RandomFlip']):
        raise ValueError(
            'CropBoxMultiView (decoding on the device) supports views made '
            'of RandomResizedCrop, an optional horizontal RandomFlip and '
            f'photometric steps; this view\'s geometric steps are {names}: '
            'decode in the workers instead (GeometricMultiView)')
    crop = TRANSFORMS.build(worker[0])
    flip = TRANSFORMS.build(worker[1]) if len(worker) == 2 else None
    if flip is not None and flip.direction != 'horizontal':
        raise ValueError(
            'CropBoxMultiView: only horizontal flips are done on the device, '
            f'got RandomFlip(direction={flip.direction!r})')
    return crop, flip


@TRANSFORMS.register_module()
class CropBoxMultiView(BaseTransform):
    """Draw each view's crop box and flip from the image size alone (its
    ``RandomResizedCrop`` and ``RandomFlip``'s draws), for device decoding.

    Required keys: ``img_shape``. Added keys: ``crop_boxes`` (int64
    ``num_views x 4``: top, left, height, width), ``flips`` (bool).

    Args:
        transforms (list[list[dict]]): View pipelines, as ``MultiView``.
        num_views (int | list[int]): Views per pipeline, as ``MultiView``.
    """

    def __init__(self, transforms: List[List[dict]],
                 num_views: Union[int, List[int]]) -> None:
        views = [_single_view_geometry(p) for p in transforms]
        self.views = repeat_per_view('CropBoxMultiView', views, num_views)

    def transform(self, results: dict) -> dict:
        shape_only = np.empty((*results['img_shape'][:2], 0), dtype=np.uint8)
        draws = [(crop.rand_crop_params(shape_only), flip is not None
                  and flip._choose_direction() == 'horizontal')
                 for crop, flip in self.views]
        results['crop_boxes'] = np.array([b for b, _ in draws], dtype=np.int64)
        results['flips'] = np.array([f for _, f in draws], dtype=bool)
        return results

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(views={len(self.views)})'
