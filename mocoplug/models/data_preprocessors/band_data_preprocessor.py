# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Sequence

import torch
from mmpretrain.models.utils import SelfSupDataPreprocessor

from mocoplug.registry import MODELS


class BandStatistics:
    """A data preprocessor's ``mean`` and ``std`` with one value per band
    (mmengine's ``ImgDataPreprocessor`` takes 1 or 3), mixed in before it.

    Args:
        mean (Sequence[float]): Per band, in the files' value range.
        std (Sequence[float]): Per band.
        **kwargs: The preprocessor's others; a channel swap (``to_rgb``,
            ``bgr_to_rgb``, ``rgb_to_bgr``) is refused.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float],
                 **kwargs) -> None:
        name = type(self).__name__
        if any(kwargs.get(k) for k in ('to_rgb', 'bgr_to_rgb', 'rgb_to_bgr')):
            raise ValueError(f'{name}: to_rgb swaps BGR to RGB; '
                             'the bands stay in the files\' order')
        if len(mean) != len(std) or not len(mean):
            raise ValueError(f'{name}: mean ({len(mean)} '
                             f'values) and std ({len(std)}) need one value '
                             'per band each')
        super().__init__(mean=mean[:1], std=std[:1], **kwargs)
        for key, values in (('mean', mean), ('std', std)):
            values = torch.tensor(values, dtype=torch.float32).view(-1, 1, 1)
            self.register_buffer(key, values, False)


@MODELS.register_module()
class BandDataPreprocessor(BandStatistics, SelfSupDataPreprocessor):
    """mmpretrain's ``SelfSupDataPreprocessor`` for images of any number of
    bands and any bit depth (multispectral tiles as in SSL4EO-S12, Wang et
    al. 2022; 16-bit scans): :class:`BandStatistics`, the bands in the
    decoded order (a TIFF's own; cv2: a colour PNG's as B, G, R)."""
