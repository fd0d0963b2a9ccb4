# Copyright (c) mocoplug contributors. All rights reserved.
import os
import os.path as osp
from typing import Dict, List

import numpy as np
from mmpretrain.datasets import BaseDataset

from mocoplug.registry import DATASETS

SPLITS = ('train', 'test', 'all')


@DATASETS.register_module()
class DigitsDataset(BaseDataset):
    """scikit-learn's 1797 bundled 8x8 digits as HWC uint8 ``img_size``
    images; a fixed stratified split keeps ``test_ratio`` for ``'test'``.

    Args:
        split (str): ``'train'`` (default), ``'test'`` or ``'all'``.
        img_size (int): Side of the output images.
        test_ratio (float): Share of each class for ``'test'``.
        with_label (bool): Whether samples carry ``gt_label``.
        **kwargs: Other arguments of mmpretrain's ``BaseDataset``.
    """

    METAINFO = {'classes': tuple(str(i) for i in range(10))}

    def __init__(self,
                 split: str = 'train',
                 img_size: int = 32,
                 test_ratio: float = 0.3,
                 with_label: bool = True,
                 **kwargs) -> None:
        if split not in SPLITS:
            raise ValueError(
                f'DigitsDataset: split must be one of {SPLITS}, got {split!r}')
        if not 0 < test_ratio < 1:
            raise ValueError('DigitsDataset: test_ratio must be in (0, 1), '
                             f'got {test_ratio}')
        self.split, self.img_size = split, img_size
        self.test_ratio, self.with_label = test_ratio, with_label
        kwargs.setdefault('ann_file', '')
        super().__init__(**kwargs)

    def split_indices(self, labels: np.ndarray) -> np.ndarray:
        """Indices of this split: a seed-independent stratified split."""
        if self.split == 'all':
            return np.arange(len(labels))
        rng, test = np.random.RandomState(0), []
        for cls in range(10):
            idx = np.flatnonzero(labels == cls)
            rng.shuffle(idx)
            test.append(idx[:int(round(len(idx) * self.test_ratio))])
        test_idx = np.sort(np.concatenate(test))
        return test_idx if self.split == 'test' else np.setdiff1d(
            np.arange(len(labels)), test_idx)

    def load_data_list(self) -> List[dict]:
        """Read the digits from scikit-learn and build the data list."""
        from PIL import Image
        from sklearn.datasets import load_digits
        digits = load_digits()
        data_list, size = [], (self.img_size, self.img_size)
        for i in self.split_indices(digits.target):
            gray = np.clip(digits.images[i] * 16, 0, 255).astype(np.uint8)
            big = np.asarray(
                Image.fromarray(gray).resize(size, Image.BILINEAR))
            info = dict(
                img=np.repeat(big[..., None], 3, axis=2), digits_index=int(i))
            if self.with_label:
                info['gt_label'] = int(digits.target[i])
            data_list.append(info)
        return data_list

    def extra_repr(self) -> List[str]:
        return [
            f'Split: \t{self.split}', f'Image size: \t{self.img_size}',
            f'With labels: \t{self.with_label}'
        ]


def write_digits_folder(root: str, img_size: int = 32) -> Dict[str, int]:
    """Write the digits as ``root/{train,val}/<digit>/<index>.png`` (val:
    the ``'test'`` split); returns the image count per folder."""
    from PIL import Image
    written = {}
    for split, folder in (('train', 'train'), ('test', 'val')):
        dataset = DigitsDataset(split=split, img_size=img_size)
        for i in range(len(dataset)):
            info = dataset.get_data_info(i)
            path = osp.join(root, folder, str(info['gt_label']),
                            f'{info["digits_index"]:04d}.png')
            os.makedirs(osp.dirname(path), exist_ok=True)
            Image.fromarray(info['img']).save(path)
        written[folder] = len(dataset)
    return written
