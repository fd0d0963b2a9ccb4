# Copyright (c) mocoplug contributors. All rights reserved.
import torch
from mmpretrain.datasets.transforms import PackInputs

from mocoplug.registry import TRANSFORMS


@TRANSFORMS.register_module()
class PackEncodedViews(PackInputs):
    """mmpretrain's ``PackInputs`` for encoded images: ``inputs`` is a
    dict of ``encoded`` bytes and ``crop_boxes``, ``flips`` and
    ``exif_orientation`` tensors (the required keys, ``img_bytes`` too)."""

    def transform(self, results: dict) -> dict:
        keys = ('img_bytes', 'crop_boxes', 'flips', 'exif_orientation')
        missing = [k for k in keys if k not in results]
        if missing:
            raise KeyError(
                f'PackEncodedViews: {missing} missing; the pipeline should '
                'be LoadImageBytes, CropBoxMultiView, PackEncodedViews')
        rest = {k: v for k, v in results.items() if k != self.input_key}
        packed = super().transform(rest)
        packed['inputs'] = dict(
            encoded=results['img_bytes'],
            crop_boxes=torch.as_tensor(results['crop_boxes']),
            flips=torch.as_tensor(results['flips']),
            exif_orientation=torch.tensor(int(results['exif_orientation'])))
        return packed
