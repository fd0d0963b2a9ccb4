# Copyright (c) mocoplug contributors. All rights reserved.
from typing import List

import cv2
import numpy as np
from mmpretrain.datasets import BaseDataset

from mocoplug.registry import DATASETS


@DATASETS.register_module()
class SyntheticImageDataset(BaseDataset):
    """Made-up images generated when loaded, for full-size runs without a
    dataset (``tools/gpu_check.py``).

    Image ``i`` is a ``grid`` x ``grid`` array of random colours enlarged
    bilinearly to ``img_size``, plus a little noise, drawn from a generator
    seeded by ``(seed, i)``. Images are HWC uint8 under ``img`` (leave
    ``LoadImageFromFile`` out of the pipeline).

    Args:
        num_images (int): Number of images.
        img_size (int): Side of the square images. Defaults to 256.
        grid (int): Colour cells per side. Defaults to 4.
        num_classes (int): ``gt_label`` is ``i % num_classes``. Default 10.
        with_label (bool): Whether samples carry ``gt_label``. Defaults to
            False.
        seed (int): Seed of the images. Defaults to 0.
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
        for name, value in dict(
                num_images=num_images,
                img_size=img_size,
                grid=grid,
                num_classes=num_classes).items():
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
        data_list = []
        for i in range(self.num_images):
            info = dict(synthetic_index=i)
            if self.with_label:
                info['gt_label'] = i % self.num_classes
            data_list.append(info)
        return data_list

    def image(self, index: int) -> np.ndarray:
        """The pixels of image ``index`` (HWC uint8)."""
        rng = np.random.default_rng([self.seed, index])
        cells = rng.integers(0, 256, (self.grid, self.grid, 3), np.uint8)
        img = cv2.resize(
            cells, (self.img_size, self.img_size),
            interpolation=cv2.INTER_LINEAR)
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
