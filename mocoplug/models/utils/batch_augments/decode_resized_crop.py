# Copyright (c) mocoplug contributors. All rights reserved.
"""Decode a batch of image files on a device and cut the views' crops
there: the device half of :class:`~mocoplug.datasets.transforms.
CropBoxMultiView`.

JPEGs are decoded with ``torchvision.io.decode_jpeg`` on the target device
(nvjpeg, the whole batch in one call, on CUDA; libjpeg-turbo on CPU); other
formats with ``torchvision.io.decode_image`` on the CPU, then copied. The
EXIF orientation is applied as OpenCV's decoding does. Each crop is resized
with PIL's antialiased filter (mmpretrain's
``RandomResizedCrop(backend='pillow')``), as the workers' crops
(:func:`~mocoplug.datasets.transforms.antialiased_resized_crop.
antialiased_resized_crop`).
"""
import warnings
from typing import List, Sequence, Tuple

import torch
import torchvision.io as tvio

from mocoplug.datasets.transforms.antialiased_resized_crop import \
    antialiased_resized_crop

JPEG_MAGIC = b'\xff\xd8\xff'


def _as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def decode_images(encoded: Sequence[bytes],
                  device: torch.device) -> List[torch.Tensor]:
    """Decode files to RGB uint8 ``3 x H x W`` tensors on ``device``.

    JPEGs are decoded on ``device`` in one call; if that fails (nvjpeg
    rejects some files, e.g. CMYK), each is retried alone, and one the
    device cannot decode goes through the CPU. Other formats are decoded
    on the CPU and copied."""
    device = torch.device(device)
    images = [None] * len(encoded)
    jpegs = [i for i, data in enumerate(encoded) if data[:3] == JPEG_MAGIC]
    with warnings.catch_warnings():  # torchvision 0.29 deprecates its io
        warnings.simplefilter('ignore', DeprecationWarning)
        try:
            decoded = tvio.decode_jpeg([_as_tensor(encoded[i]) for i in jpegs],
                                       mode=tvio.ImageReadMode.RGB,
                                       device=device) if jpegs else []
        except RuntimeError:
            decoded = []
            for i in jpegs:
                try:
                    decoded.append(
                        tvio.decode_jpeg(
                            _as_tensor(encoded[i]),
                            mode=tvio.ImageReadMode.RGB,
                            device=device))
                except RuntimeError:
                    decoded.append(None)
        for i, image in zip(jpegs, decoded):
            images[i] = image
        for i, data in enumerate(encoded):
            if images[i] is None:
                images[i] = tvio.decode_image(
                    _as_tensor(data), mode=tvio.ImageReadMode.RGB).to(device)
    return images


def apply_exif_orientation(image: torch.Tensor,
                           orientation: int) -> torch.Tensor:
    """Turn a ``C x H x W`` image as EXIF ``orientation`` (1-8) says, as
    PIL's ``ImageOps.exif_transpose`` and OpenCV's decoders do."""
    if orientation == 2:
        return image.flip(-1)
    if orientation == 3:
        return image.flip(-2, -1)
    if orientation == 4:
        return image.flip(-2)
    if orientation == 5:
        return image.transpose(-2, -1)
    if orientation == 6:
        return image.transpose(-2, -1).flip(-1)
    if orientation == 7:
        return image.transpose(-2, -1).flip(-2, -1)
    if orientation == 8:
        return image.transpose(-2, -1).flip(-2)
    return image


def decode_views(encoded: Sequence[bytes], orientations: torch.Tensor,
                 crop_boxes: torch.Tensor, flips: torch.Tensor,
                 sizes: Sequence[Tuple[int, int]], modes: Sequence[str],
                 device: torch.device) -> List[torch.Tensor]:
    """Decode a batch and cut every view.

    Args:
        encoded (Sequence[bytes]): ``B`` files.
        orientations (Tensor): ``B`` EXIF orientations (CPU).
        crop_boxes (Tensor): ``B x V x 4`` boxes (CPU), in the oriented
            image: top, left, height, width.
        flips (Tensor): ``B x V`` horizontal flips (CPU).
        sizes (Sequence[tuple]): ``V`` output sizes (height, width).
        modes (Sequence[str]): ``V`` interpolation modes.
        device (torch.device): Where to decode and crop.

    Returns:
        list[Tensor]: ``V`` uint8 ``B x 3 x h x w`` BGR views (mmcv's
        channel order, as the workers' views).
    """
    # (the boxes, flips and orientations are CPU tensors: no device sync)
    images = [
        apply_exif_orientation(image, orientation)
        for image, orientation in zip(
            decode_images(encoded, device), orientations.tolist())
    ]
    boxes = crop_boxes.tolist()
    flips = flips.tolist()
    views = []
    for v, (size, mode) in enumerate(zip(sizes, modes)):
        crops = []
        for b, image in enumerate(images):
            crop = antialiased_resized_crop(image, boxes[b][v], size, mode)
            crops.append(crop.flip(-1) if flips[b][v] else crop)
        views.append(torch.stack(crops).flip(1))  # RGB -> BGR
    return views
