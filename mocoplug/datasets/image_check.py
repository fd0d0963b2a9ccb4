# Copyright (c) mocoplug contributors. All rights reserved.
"""Decode an image file as the training pipeline does, or say why not."""
import contextlib
import inspect
import os
from typing import List, Optional, Sequence, Tuple

import mmcv
import mmengine.fileio as fileio
import numpy as np
from mmpretrain.datasets import CustomDataset


class UnreadableImageError(RuntimeError):
    """An image file that cannot be read or decoded (one message argument)."""


_DEFAULT = inspect.signature(CustomDataset).parameters['extensions'].default
#: File extensions ``CustomDataset`` loads, read from its signature.
IMAGE_EXTENSIONS = tuple(sorted({e.lower() for e in _DEFAULT}))


def decode_image(path: str,
                 backend: str = 'cv2',
                 color_type: str = 'color',
                 backend_args: Optional[dict] = None) -> np.ndarray:
    """Read and decode an image as mmcv's ``LoadImageFromFile`` does.

    Raises:
        UnreadableImageError: With the reason.
    """
    try:
        content = fileio.get(path, backend_args=backend_args)
    except Exception as e:  # missing file, permissions, storage errors
        detail = ' '.join(str(e).split())
        raise UnreadableImageError(
            f'the file cannot be read ({type(e).__name__}: {detail})') from e
    if len(content) == 0:
        raise UnreadableImageError('the file is empty (0 bytes)')
    try:
        img = mmcv.imfrombytes(content, flag=color_type, backend=backend)
    except Exception as e:  # cv2.error, PIL's UnidentifiedImageError, ...
        detail = ' '.join(str(e).split())  # cv2's errors span lines
        raise UnreadableImageError(
            f'{backend} cannot decode it ({type(e).__name__}: {detail}; '
            f'{len(content)} bytes)') from e
    if img is None:
        raise UnreadableImageError(
            f'{backend} cannot decode it (not an image, or a truncated or '
            f'corrupt one; {len(content)} bytes)')
    if img.size == 0:
        raise UnreadableImageError(
            f'it decodes to an image without pixels (shape {img.shape})')
    return img


def check_image(path: str,
                backend: str = 'cv2',
                color_type: str = 'color') -> Optional[str]:
    """Why ``path`` cannot be decoded, or None if it can."""
    try:
        decode_image(path, backend, color_type)
    except UnreadableImageError as e:
        return str(e)
    return None


#: PNG colour types as bands (alpha is no band; a palette: 3 bands, 8 bits)
_PNG_BANDS = {0: 1, 2: 3, 3: 3, 4: 1, 6: 3}
#: PIL modes of other files as (bands, bits); any other mode: (3, 8)
_PIL_MODES = {
    mode: (1, bits)
    for bits, modes in ((1, '1'), (8, 'L LA'), (16, 'I;16 I;16B I;16L I;16N'),
                        (32, 'I F'))
    for mode in modes.split()
}


def file_format(path: str) -> Tuple[int, int]:
    """(bands, bits per sample) an image file holds, from its header: an
    alpha channel of an 8-bit image is no band; a palette or a colour space
    (CMYK, YCbCr, Lab) is 3 bands of 8 bits; PNG from its IHDR (PIL reads
    16-bit RGB as 8-bit); TIFF through tifffile (every axis but Y and X
    counts as bands; beyond 8 bits an extra sample is a band)."""
    if path.lower().endswith(('.tif', '.tiff')):
        import tifffile
        with tifffile.TiffFile(path) as tif:
            page, series = tif.pages[0], tif.series[0]
            bits = series.dtype.itemsize * 8
            if int(page.photometric) in (3, 5, 6, 8):  # palette, CMYK, ...
                return 3, 8
            axes = zip(series.axes, series.shape)
            bands = int(np.prod([n for axis, n in axes if axis not in 'YX']))
            alpha = sum(int(e) in (1, 2) for e in page.extrasamples or ())
            return bands - (alpha if bits == 8 else 0), bits
    with open(path, 'rb') as f:
        head = f.read(26)
    if head[:8] == b'\x89PNG\r\n\x1a\n' and head[12:16] == b'IHDR':
        depth, colour = head[24], head[25]
        return _PNG_BANDS.get(colour, 3), 8 if colour == 3 else depth
    from PIL import Image
    with Image.open(path) as img:
        return _PIL_MODES.get(img.mode, (3, 8))


def tiff_is_planar(path: str) -> bool:
    """Whether a TIFF stores its bands before its rows (``C x H x W``),
    which mmcv's tifffile decode returns channel-first."""
    import tifffile
    with tifffile.TiffFile(path) as tif:
        axes = tif.series[0].axes
    return bool(axes) and axes[-1] == 'X' and len(axes) > 2


def quiet_decoder_warnings() -> None:
    """Silence OpenCV's own warnings on broken files (unless another OpenCV
    build lacks the setting), for a caller that reports the reason itself."""
    with contextlib.suppress(ImportError, AttributeError):
        import cv2
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)


def find_images(root: str,
                extensions: Sequence[str] = IMAGE_EXTENSIONS) -> List[str]:
    """The files ``CustomDataset`` lists under ``root``, sorted: with an
    extension in ``extensions`` (any case), not starting with '.', in every
    folder (hidden ones too), symlinks followed; a symlink loop, which the
    dataset follows without end, is a ``ValueError`` naming it."""
    exts, found = tuple(e.lower() for e in extensions), []
    for folder, _, files in os.walk(root, followlinks=True):
        real, parent = os.path.realpath(folder), os.path.dirname(folder)
        while len(parent) >= len(root):
            if os.path.realpath(parent) == real:
                raise ValueError(
                    f'{folder} links back to {parent}: CustomDataset would '
                    'list it without end; remove the link.')
            parent = os.path.dirname(parent)
        names = [f for f in files if f.lower().endswith(exts)]
        found += [os.path.join(folder, f) for f in names if f[0] != '.']
    return sorted(found)
