# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F

# RandomResizedCrop's interpolations that torch resizes with PIL's filter
TORCH_MODES = {'bilinear': 'bilinear', 'bicubic': 'bicubic'}


def antialiased_resized_crop(image: torch.Tensor,
                             box: Sequence[int],
                             size: Tuple[int, int],
                             mode: str = 'bilinear') -> torch.Tensor:
    """Crop ``box`` (top, left, height, width) of a uint8 ``C x H x W``
    image, resized to ``size`` (h, w) as PIL's ``mode`` filter (2 levels)."""
    top, left, height, width = (int(v) for v in box)
    crop = image[None, :, top:top + height, left:left + width]
    kwargs = dict(size=size, mode=mode, antialias=True, align_corners=False)
    if crop.device.type == 'cpu' and crop.dtype == torch.uint8:
        out = F.interpolate(crop, **kwargs)
    else:
        out = F.interpolate(crop.float(), **kwargs)
        out = out.round_().clamp_(0, 255).to(torch.uint8)
    return out[0].contiguous()
