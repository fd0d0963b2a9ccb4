# Copyright (c) mocoplug contributors. All rights reserved.
import io
from typing import Optional

import mmengine.fileio as fileio
from mmcv.transforms import BaseTransform
from PIL import Image

from mocoplug.registry import TRANSFORMS
from ..image_check import UnreadableImageError

EXIF_ORIENTATION = 0x0112
# EXIF orientations that swap width and height (a 90 degree turn)
TRANSPOSING_ORIENTATIONS = (5, 6, 7, 8)


@TRANSFORMS.register_module()
class LoadImageBytes(BaseTransform):
    """Read an image file's bytes and oriented size, not decoding it.

    Required keys: ``img_path``. Added keys: ``img_bytes``, ``img_shape``,
    ``ori_shape``, ``exif_orientation`` (1: none).

    Args:
        backend_args (dict, optional): mmengine file backend arguments.
    """

    def __init__(self, backend_args: Optional[dict] = None) -> None:
        self.backend_args = backend_args

    def transform(self, results: dict) -> dict:
        path = results['img_path']
        try:
            data = fileio.get(path, backend_args=self.backend_args)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                orientation = int(image.getexif().get(EXIF_ORIENTATION, 1))
        except Exception as e:  # missing, unreadable, not an image
            detail = ' '.join(str(e).split())
            raise UnreadableImageError(
                f'{path}: cannot read the image header ({type(e).__name__}: '
                f'{detail}); check the file with tools/misc/check_images.py')
        if orientation in TRANSPOSING_ORIENTATIONS:
            width, height = height, width
        results['img_bytes'] = data
        results['img_shape'] = results['ori_shape'] = (height, width)
        results['exif_orientation'] = orientation
        return results

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(backend_args={self.backend_args})'
