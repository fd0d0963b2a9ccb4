# Copyright (c) mocoplug contributors. All rights reserved.
"""Decoding an image file the way the training pipeline does, with the
reason when it cannot be decoded: shared by ``CheckedLoadImageFromFile``
(while training) and ``tools/misc/check_images.py`` (before training)."""
import inspect
import os
from typing import List, Optional, Sequence, Tuple

import mmcv
import mmengine.fileio as fileio
import numpy as np
from mmpretrain.datasets import CustomDataset


class UnreadableImageError(RuntimeError):
    """An image file that cannot be read or decoded.

    Takes one message argument, so that PyTorch's DataLoader can re-raise
    it, with its type, in the main process when a worker hits it.
    """


def _default_extensions() -> Tuple[str, ...]:
    # The extensions mmpretrain's CustomDataset scans for, read from its
    # signature so the two never disagree.
    default = inspect.signature(CustomDataset).parameters['extensions'].default
    return tuple(sorted({e.lower() for e in default}))


#: File extensions ``CustomDataset`` (and so the folder config) loads.
IMAGE_EXTENSIONS: Tuple[str, ...] = _default_extensions()


def decode_image(path: str,
                 backend: str = 'cv2',
                 color_type: str = 'color',
                 backend_args: Optional[dict] = None) -> np.ndarray:
    """Read and fully decode an image as mmcv's ``LoadImageFromFile`` does
    (``mmengine.fileio.get`` + ``mmcv.imfrombytes``).

    Args:
        path (str): The file.
        backend (str): mmcv's decoding backend: ``'cv2'`` (the pipeline's
            default), ``'pillow'``, ``'turbojpeg'`` or ``'tifffile'``.
        color_type (str): mmcv's ``flag``, e.g. ``'color'``.
        backend_args (dict, optional): mmengine file backend arguments.

    Returns:
        np.ndarray: The decoded image.

    Raises:
        UnreadableImageError: With the reason: the file cannot be read, is
            empty, cannot be decoded (not an image, truncated, corrupt), or
            decodes to an image without pixels.
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
    """Why ``path`` cannot be decoded, or None if it can (for a pool of
    worker processes: a module-level function of plain arguments)."""
    try:
        decode_image(path, backend, color_type)
    except UnreadableImageError as e:
        return str(e)
    return None


def quiet_decoder_warnings() -> None:
    """Silence OpenCV's own warnings on broken files (e.g. "PNG input
    buffer is incomplete"): a caller that reports the reason itself."""
    try:
        import cv2
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
    except (ImportError, AttributeError):  # another OpenCV build: keep them
        pass


def find_images(root: str,
                extensions: Sequence[str] = IMAGE_EXTENSIONS) -> List[str]:
    """Every file under ``root`` (recursively, symlinked folders followed
    as ``CustomDataset`` does) whose extension is in ``extensions``
    (case-insensitive), sorted."""
    exts = tuple(e.lower() for e in extensions)
    found = []
    for folder, _, files in os.walk(root, followlinks=True):
        found += [
            os.path.join(folder, f) for f in files if f.lower().endswith(exts)
        ]
    return sorted(found)
