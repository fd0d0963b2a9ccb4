# Copyright (c) mocoplug contributors. All rights reserved.
"""The device half of :class:`~mocoplug.datasets.transforms.CropBoxMultiView`:
decode images and cut the views' crops (PIL's antialiased resize) there."""
import warnings
from typing import Dict, Iterator, List, Sequence, Tuple

import torch
import torchvision.io as tvio
from torch import Tensor

JPEG_MAGIC = b'\xff\xd8\xff'
PADDED_ELEMENTS = 2**28
_DECODE_STREAMS: Dict[torch.device, torch.cuda.Stream] = {}


def _as_tensor(data: bytes) -> Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def decode_images(encoded: Sequence[bytes],
                  device: torch.device) -> List[Tensor]:
    """Decode files to RGB uint8 ``3 x H x W`` tensors on ``device`` (JPEGs
    decoded there when it can, the others on the CPU)."""
    device = torch.device(device)
    images = [None] * len(encoded)
    jpegs = [i for i, data in enumerate(encoded) if data[:3] == JPEG_MAGIC]
    with warnings.catch_warnings():  # torchvision 0.29 deprecates its io
        warnings.simplefilter('ignore', DeprecationWarning)
        decoded = _decode_jpegs([_as_tensor(encoded[i])
                                 for i in jpegs], device) if jpegs else []
        for i, image in zip(jpegs, decoded):
            images[i] = image
        for i, data in enumerate(encoded):
            if images[i] is None:
                images[i] = to_device(
                    tvio.decode_image(
                        _as_tensor(data), mode=tvio.ImageReadMode.RGB), device)
    return images


def _decode_jpegs(data: List[Tensor], device: torch.device) -> List[Tensor]:
    """``decode_jpeg`` on ``device``, in one call, else one by one (None where
    it fails); on CUDA on a side stream (torchvision's race, PR #9606)."""

    def decode(files):
        try:
            return tvio.decode_jpeg(
                files, mode=tvio.ImageReadMode.RGB, device=device)
        except RuntimeError:
            return None

    def decode_all():
        return decode(data) or [decode(d) for d in data]

    if device.type != 'cuda':
        return decode_all()
    current = torch.cuda.current_stream(device)
    side = _DECODE_STREAMS.setdefault(device, torch.cuda.Stream(device))
    side.wait_stream(current)
    with torch.cuda.stream(side):
        decoded = decode_all()
    current.wait_stream(side)
    for image in decoded:
        if image is not None:
            image.record_stream(current)
    return decoded


def apply_exif_orientation(image: Tensor, orientation: int) -> Tensor:
    """Turn a ``C x H x W`` image as EXIF ``orientation`` (1-8) says."""
    if orientation in (5, 6, 7, 8):
        image = image.transpose(-2, -1)
    if orientation in (2, 6):
        return image.flip(-1)
    if orientation in (3, 7):
        return image.flip(-2, -1)
    if orientation in (4, 8):
        return image.flip(-2)
    return image


def decode_views(encoded: Sequence[bytes], orientations: Tensor,
                 crop_boxes: Tensor, flips: Tensor,
                 sizes: Sequence[Tuple[int, int]], modes: Sequence[str],
                 device: torch.device) -> List[Tensor]:
    """Decode ``B`` files on ``device`` and cut ``V`` uint8 ``B x 3 x h x w``
    BGR views. ``orientations`` (``B``), ``crop_boxes`` (``B x V x 4``: top,
    left, height, width) and ``flips`` (``B x V``) are CPU tensors; ``sizes``,
    ``modes``: each view's (height, width), interpolation."""
    device = torch.device(device)
    decoded = decode_images(encoded, device)
    images = list(map(apply_exif_orientation, decoded, orientations.tolist()))
    params = torch.cat([crop_boxes.float(), flips[..., None].float()], -1)
    views, order = [[] for _ in sizes], []
    for chunk in _chunks([i.shape[-2:] for i in images], PADDED_ELEMENTS):
        order += chunk
        batch = _padded([images[i] for i in chunk])
        chunk_params = to_device(params[chunk], device)
        for v, (size, mode) in enumerate(zip(sizes, modes)):
            crops = resized_crops(batch, chunk_params[:, v, :4], size, mode)
            crops = crops.round_().clamp_(0, 255).to(torch.uint8)
            flip = chunk_params[:, v, 4, None, None, None] > 0
            views[v].append(torch.where(flip, crops.flip(-1), crops))
    inverse = to_device(torch.tensor(order).argsort(), device)
    return [torch.cat(v)[inverse].flip(1) for v in views]  # RGB -> BGR


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """``tensor`` on ``device`` (to CUDA via pinned memory, no host wait)."""
    device = torch.device(device)
    if device.type == 'cuda' and tensor.device.type == 'cpu' \
            and not tensor.is_pinned():
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def _chunks(shapes: Sequence[Tuple[int, int]],
            budget: int) -> Iterator[List[int]]:
    """Indices by size, in runs of padded batches <= ``budget`` (or one)."""
    order = sorted(
        range(len(shapes)), key=lambda i: shapes[i][0] * shapes[i][1])
    chunk, height, width = [], 0, 0
    for i in order:
        h, w = max(height, shapes[i][0]), max(width, shapes[i][1])
        if chunk and (len(chunk) + 1) * 3 * h * w > budget:
            yield chunk
            chunk, h, w = [], shapes[i][0], shapes[i][1]
        chunk.append(i)
        height, width = h, w
    if chunk:
        yield chunk


def _padded(images: Sequence[Tensor]) -> Tensor:
    """The ``3 x H x W`` images as one float32 batch, zero-padded."""
    height, width = (max(i.shape[d] for i in images) for d in (-2, -1))
    batch = images[0].new_zeros((len(images), 3, height, width),
                                dtype=torch.float32)
    for out, image in zip(batch, images):
        out[:, :image.shape[-2], :image.shape[-1]] = image
    return batch


def filter_weights(starts: Tensor, lengths: Tensor, out: int, size: int,
                   mode: str) -> Tensor:
    """Weights (``N x out x size``) of PIL's antialiased 'bilinear' or
    'bicubic' resize of ``N`` spans (``starts``, ``lengths``) of an axis of
    ``size`` pixels to ``out`` pixels."""
    starts, lengths = starts[:, None, None], lengths[:, None, None]
    scale = lengths / out
    stretch = scale.clamp(min=1.)  # the filter's support grows downscaling
    support = (1. if mode == 'bilinear' else 2.) * stretch
    center = scale * (torch.arange(out, device=starts.device)[:, None] + .5)
    first = (center - support + .5).floor().clamp(min=0.)
    end = torch.minimum((center + support + .5).floor(), lengths)
    pixel = torch.arange(size, device=starts.device) - starts  # in the span
    x = ((pixel - center + .5) / stretch).abs()
    if mode == 'bilinear':
        weights = (1. - x).clamp(min=0.)
    else:  # cubic convolution, a = -0.5 (PIL's and torch's antialiasing)
        a = -.5
        weights = torch.where(
            x < 1., ((a + 2.) * x - (a + 3.)) * x * x + 1.,
            torch.where(x < 2., (((x - 5.) * x + 8.) * x - 4.) * a, 0.))
    weights = weights * ((pixel >= first) & (pixel < end))
    return weights / weights.sum(-1, keepdim=True)


def resized_crops(images: Tensor, boxes: Tensor, size: Tuple[int, int],
                  mode: str) -> Tensor:
    """Crop ``boxes`` (``N x 4``: top, left, height, width) of a padded batch,
    resized to ``size`` by PIL's filter (float32, unrounded)."""
    top, left, height, width = boxes.float().unbind(-1)
    rows = filter_weights(top, height, size[0], images.shape[-2], mode)
    cols = filter_weights(left, width, size[1], images.shape[-1], mode)
    return rows[:, None] @ images @ cols[:, None].transpose(-1, -2)
