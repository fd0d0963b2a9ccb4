# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List, Optional, Tuple, Union

import numpy as np
import torch
from mmpretrain.datasets.transforms import MultiView

from mocoplug.registry import TRANSFORMS
from .antialiased_resized_crop import TORCH_MODES, antialiased_resized_crop
from .view_pipeline_split import (repeat_per_view, split_view_pipeline,
                                  transform_name)


def _crop_and_flip(pipeline) -> Optional[Tuple]:
    """(RandomResizedCrop, RandomFlip or None) when a built view pipeline is
    a PIL-backed crop and an optional horizontal flip, else None."""
    steps = list(pipeline.transforms)
    names = [transform_name(type(t).__name__) for t in steps]
    if names not in (['RandomResizedCrop'],
                     ['RandomResizedCrop', 'RandomFlip']):
        return None
    crop, flip = steps[0], (steps[1] if len(steps) == 2 else None)
    pil = getattr(crop, 'backend', None) == 'pillow' and getattr(
        crop, 'interpolation', None) in TORCH_MODES
    if not pil or (flip is not None and flip.direction != 'horizontal'):
        return None
    return crop, flip


@TRANSFORMS.register_module()
class GeometricMultiView(MultiView):
    """mmpretrain's ``MultiView`` running only the geometric steps of each
    view (:func:`split_view_pipeline`). Views of ``RandomResizedCrop(
    backend='pillow')`` and an optional horizontal flip become uint8 ``3 x
    H x W`` tensors (:func:`antialiased_resized_crop`, same draws).

    Required keys: ``img``. Modified keys: ``img`` (a list of views).

    Args:
        transforms (list[list[dict]]): View pipelines, as ``MultiView``.
        num_views (int | list[int]): Views per pipeline, as ``MultiView``.
    """

    def __init__(self, transforms: List[List[dict]],
                 num_views: Union[int, List[int]]) -> None:
        geometric = [split_view_pipeline(p)[0] for p in transforms]
        super().__init__(geometric, num_views)
        fast = [_crop_and_flip(p) for p in self.pipelines]
        self.fast_views = None if any(f is None for f in fast) else \
            repeat_per_view('GeometricMultiView', fast, self.num_views)

    def transform(self, results: dict) -> dict:
        img = results['img']
        if self.fast_views is None or not (isinstance(
                img, np.ndarray) and img.dtype == np.uint8 and img.ndim == 3):
            return super().transform(results)
        image = torch.from_numpy(img).permute(2, 0, 1)  # a view, no copy
        views = []
        for crop, flip in self.fast_views:
            box = crop.rand_crop_params(img)  # crop.scale is (h, w)
            view = antialiased_resized_crop(image, box, tuple(crop.scale),
                                            TORCH_MODES[crop.interpolation])
            if flip is not None and flip._choose_direction() == 'horizontal':
                view = view.flip(-1)
            views.append(view)
        results['img'] = views
        return results
