# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Sequence

import torch
from mmpretrain.models.utils import SelfSupDataPreprocessor

from mocoplug.registry import MODELS


@MODELS.register_module()
class BandDataPreprocessor(SelfSupDataPreprocessor):
    """mmpretrain's ``SelfSupDataPreprocessor`` for images of any number of
    bands and any bit depth (multispectral tiles as in SSL4EO-S12, Wang et
    al. 2022; 16-bit scans): one ``mean`` and ``std`` per band, in the
    files' value range (mmengine's take 1 or 3 values), the bands in the
    decoded order (a TIFF's own; cv2: a colour PNG's as B, G, R).

    Args:
        mean (Sequence[float]): Per band.
        std (Sequence[float]): Per band.
        **kwargs: ``SelfSupDataPreprocessor``'s others; a channel swap
            (``to_rgb``, ``bgr_to_rgb``, ``rgb_to_bgr``) is refused.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float],
                 **kwargs) -> None:
        if any(kwargs.get(k) for k in ('to_rgb', 'bgr_to_rgb', 'rgb_to_bgr')):
            raise ValueError('BandDataPreprocessor: to_rgb swaps BGR to RGB; '
                             'the bands stay in the files\' order')
        if len(mean) != len(std) or not len(mean):
            raise ValueError(f'BandDataPreprocessor: mean ({len(mean)} '
                             f'values) and std ({len(std)}) need one value '
                             'per band each')
        super().__init__(mean=mean[:1], std=std[:1], **kwargs)
        self.register_buffer(
            'mean',
            torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1), False)
        self.register_buffer(
            'std',
            torch.tensor(std, dtype=torch.float32).view(-1, 1, 1), False)
