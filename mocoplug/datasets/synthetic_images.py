# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List

import cv2
import numpy as np
from mmpretrain.datasets import BaseDataset

from mocoplug.registry import DATASETS


@DATASETS.register_module()
class SyntheticImageDataset(BaseDataset):
    """Made-up HWC uint8 images under ``img``, made when loaded (no
    ``LoadImageFromFile``): image ``i`` is a ``grid`` x ``grid`` array of
    random colours from ``(seed, i)``, enlarged to ``img_size``, plus noise.

    Args:
        num_images (int): Number of images.
        img_size (int): Side of the square images.
        grid (int): Colour cells per side.
        num_classes (int): ``gt_label`` is ``i % num_classes``.
        with_label (bool): Whether samples carry ``gt_label``.
        seed (int): Seed of the images.
        **kwargs: Other arguments of mmpretrain's ``BaseDataset``.
    """

    def __init__(self,
                 num_images: int,
                 img_size: int = 256,
                 grid: int = 4,
                 num_classes: int = 10,
                 with_label: bool = False,
                 seed: int = 0,
                 **kwargs) -> None:
        names = ('num_images', 'img_size', 'grid', 'num_classes')
        values = (num_images, img_size, grid, num_classes)
        for name, value in zip(names, values):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f'SyntheticImageDataset: {name} must be a '
                                 f'positive int, got {value!r}')
        self.num_images, self.img_size, self.grid = num_images, img_size, grid
        self.num_classes, self.with_label = num_classes, with_label
        self.seed = seed
        kwargs.setdefault('ann_file', '')
        kwargs.setdefault('metainfo',
                          dict(classes=[str(c) for c in range(num_classes)]))
        super().__init__(**kwargs)

    def load_data_list(self) -> List[dict]:
        """One entry per image; the pixels are made in get_data_info."""
        return [
            dict(synthetic_index=i, gt_label=i %
                 self.num_classes) if self.with_label else dict(
                     synthetic_index=i) for i in range(self.num_images)
        ]

    def image(self, index: int) -> np.ndarray:
        """The pixels of image ``index`` (HWC uint8)."""
        rng = np.random.default_rng([self.seed, index])
        cells = rng.integers(0, 256, (self.grid, self.grid, 3), np.uint8)
        img = cv2.resize(cells, (self.img_size, self.img_size))  # bilinear
        noise = rng.integers(-8, 9, img.shape, np.int16)
        return np.clip(img + noise, 0, 255).astype(np.uint8)

    def get_data_info(self, idx: int) -> dict:
        info = super().get_data_info(idx)
        img = self.image(info['synthetic_index'])
        info.update(img=img, img_shape=img.shape[:2], ori_shape=img.shape[:2])
        return info

    def extra_repr(self) -> List[str]:
        return [
            f'Images: \t{self.num_images}', f'Image size: \t{self.img_size}',
            f'Seed: \t{self.seed}'
        ]
