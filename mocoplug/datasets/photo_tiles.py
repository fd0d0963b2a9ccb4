# Copyright (c) mocoplug contributors. All rights reserved.
import os.path as osp
from typing import List, Tuple

import numpy as np
from mmpretrain.datasets import BaseDataset

from mocoplug.registry import DATASETS

#: scikit-image's bundled photographs the evaluation tiles come from
PHOTOS = ('astronaut', 'chelsea', 'coffee', 'rocket', 'motorcycle_left',
          'hubble_deep_field', 'ihc', 'retina', 'brick', 'grass', 'gravel',
          'camera')
#: other images, for a stand-in of released weights (never evaluated on)
SOURCE = ('coins', 'moon', 'page', 'text', 'cell', 'microaneurysms',
          'motorcycle_right', 'clock_motion')


def _load(name: str, short_side: int) -> np.ndarray:
    """RGB uint8, scaled to ``short_side`` on its shorter side."""
    from PIL import Image
    if name in ('china', 'flower'):  # scikit-learn's two photographs
        from sklearn.datasets import load_sample_image
        img = Image.fromarray(load_sample_image(f'{name}.jpg'))
    else:
        import skimage
        folder = osp.join(osp.dirname(skimage.__file__), 'data')
        ext = 'jpg' if name in ('rocket', 'hubble_deep_field',
                                'retina') else 'png'
        img = Image.open(osp.join(folder, f'{name}.{ext}'))
    img = img.convert('RGB')
    scale = short_side / min(img.size)
    img = img.resize((round(img.width * scale), round(img.height * scale)),
                     Image.BILINEAR)
    return np.asarray(img)


@DATASETS.register_module()
class PhotoTilesDataset(BaseDataset):
    """Square HWC uint8 tiles of scikit-image's and scikit-learn's bundled
    photographs, labelled by photograph: ``'train'`` (random) and
    ``'memory'`` (a half-overlapping grid) from the left ``1 - test_ratio``
    of each, ``'test'`` (a grid) from the rest; ``'source'``: random tiles
    of other images (``SOURCE``, china, flower).

    Args:
        split (str): ``'train'``, ``'memory'``, ``'test'`` or ``'source'``.
        num_tiles (int): Tiles of ``'train'``/``'source'``.
        tile (int): Tile side.
        short_side (int): Photograph scale.
        test_ratio (float): Share of the width held out.
        seed (int): Seed of the random positions.
        with_label (bool): Whether samples carry ``gt_label``.
    """

    METAINFO = {'classes': PHOTOS}

    def __init__(self,
                 split: str = 'train',
                 num_tiles: int = 1000,
                 tile: int = 32,
                 short_side: int = 192,
                 test_ratio: float = 0.25,
                 seed: int = 0,
                 with_label: bool = True,
                 **kwargs) -> None:
        if split not in ('train', 'memory', 'test', 'source'):
            raise ValueError("PhotoTilesDataset: split must be 'train', "
                             f"'memory', 'test' or 'source', got {split!r}")
        self.split, self.num_tiles, self.tile = split, num_tiles, tile
        self.short_side, self.test_ratio = short_side, test_ratio
        self.seed, self.with_label = seed, with_label
        kwargs.setdefault('ann_file', '')
        super().__init__(**kwargs)

    def regions(self) -> List[Tuple[int, np.ndarray]]:
        """(label, region) of every photograph for this split."""
        names = SOURCE + ('china', 'flower') if self.split == 'source' \
            else PHOTOS
        out = []
        for label, name in enumerate(names):
            img = _load(name, self.short_side)
            cut = int(round(img.shape[1] * (1 - self.test_ratio)))
            region = img[:, cut:] if self.split == 'test' else img[:, :cut]
            out.append((label, region if self.split != 'source' else img))
        return out

    def load_data_list(self) -> List[dict]:
        t, rng = self.tile, np.random.RandomState(self.seed)
        regions, tiles = self.regions(), []
        if self.split in ('train', 'source'):
            for i in range(self.num_tiles):
                label, region = regions[i % len(regions)]
                y = rng.randint(0, region.shape[0] - t + 1)
                x = rng.randint(0, region.shape[1] - t + 1)
                tiles.append((label, region[y:y + t, x:x + t]))
        else:
            step = t // 2  # a grid of half-overlapping tiles
            for label, region in regions:
                for y in range(0, region.shape[0] - t + 1, step):
                    for x in range(0, region.shape[1] - t + 1, step):
                        tiles.append((label, region[y:y + t, x:x + t]))
        return [
            dict(img=np.ascontiguousarray(img), gt_label=label)
            if self.with_label else dict(img=np.ascontiguousarray(img))
            for label, img in tiles
        ]
