# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List, Optional, Tuple, Union

import numpy as np
import torch
from mmpretrain.datasets.transforms import MultiView

from mocoplug.registry import TRANSFORMS
from .antialiased_resized_crop import TORCH_MODES, antialiased_resized_crop
from .view_pipeline_split import split_view_pipeline, transform_name


def _crop_and_flip(pipeline) -> Optional[Tuple]:
    """(RandomResizedCrop, RandomFlip or None) when a built view pipeline is
    a PIL-backed crop and an optional horizontal flip (the ImageNet
    recipes), else None."""
    steps = list(pipeline.transforms)
    names = [transform_name(type(t).__name__) for t in steps]
    if names not in (['RandomResizedCrop'],
                     ['RandomResizedCrop', 'RandomFlip']):
        return None
    crop = steps[0]
    flip = steps[1] if len(steps) == 2 else None
    if getattr(crop, 'backend', None) != 'pillow' or getattr(
            crop, 'interpolation',
            None) not in TORCH_MODES or (flip is not None
                                         and flip.direction != 'horizontal'):
        return None
    return crop, flip


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
    the same pipelines.

    When every view is ``RandomResizedCrop(backend='pillow')`` plus an
    optional horizontal ``RandomFlip`` (the ImageNet recipes), the views
    are cut without copying the image: the same random draws (the
    transforms' own), the crop resized by torch's uint8 antialiased kernel
    (PIL's filter, three times faster than PIL here, within 2 grey levels
    of it: see :func:`antialiased_resized_crop`), and returned as uint8
    ``3 x H x W`` tensors, which ``PackInputs`` passes on as they are.
    Other views run the configured transforms and stay ``H x W x 3``
    arrays, as ``MultiView``'s.

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
        self.fast_views = None
        if all(f is not None for f in fast):
            self.fast_views = [
                f for f, n in zip(fast, self.num_views) for _ in range(n)
            ]

    def transform(self, results: dict) -> dict:
        img = results['img']
        if self.fast_views is None or not (isinstance(
                img, np.ndarray) and img.dtype == np.uint8 and img.ndim == 3):
            return super().transform(results)
        image = torch.from_numpy(img).permute(2, 0, 1)  # a view, no copy
        views = []
        for crop, flip in self.fast_views:
            box = crop.rand_crop_params(img)
            height, width = crop.scale  # mmpretrain's scale is (h, w)
            view = antialiased_resized_crop(image, box, (height, width),
                                            TORCH_MODES[crop.interpolation])
            if flip is not None and flip._choose_direction() == 'horizontal':
                view = view.flip(-1)
            views.append(view)
        results['img'] = views
        return results
