# Copyright (c) mocoplug contributors. All rights reserved.
from .digits import DigitsDataset, write_digits_folder
from .image_check import (IMAGE_EXTENSIONS, UnreadableImageError, check_image,
                          decode_image, find_images)
from .labelled_folder import fill_data_root, labelled_folder_classes
from .photo_tiles import PhotoTilesDataset
from .synthetic_images import SyntheticImageDataset
from .transforms import *  # noqa: F401,F403
from .wrapped_dataset import dataset_transforms, unwrap_dataset

__all__ = [
    'DigitsDataset', 'PhotoTilesDataset', 'IMAGE_EXTENSIONS',
    'UnreadableImageError', 'check_image', 'decode_image', 'find_images',
    'SyntheticImageDataset', 'fill_data_root', 'labelled_folder_classes',
    'dataset_transforms', 'unwrap_dataset', 'write_digits_folder'
]
