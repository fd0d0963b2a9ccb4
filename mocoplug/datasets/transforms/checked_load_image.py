# Copyright (c) mocoplug contributors. All rights reserved.
import logging
import sys
from typing import Optional, Tuple

from mmcv.transforms import LoadImageFromFile
from mmengine.dataset import BaseDataset
from mmengine.logging import print_log

from mocoplug.registry import TRANSFORMS
from ..image_check import UnreadableImageError, decode_image


@TRANSFORMS.register_module()
class CheckedLoadImageFromFile(LoadImageFromFile):
    """mmcv's ``LoadImageFromFile`` raising :class:`UnreadableImageError`
    on an unreadable image or, with ``skip_unreadable``, warning and
    returning None (another image is fetched) up to a ratio of failures.

    Args:
        skip_unreadable (bool): Skip unreadable images with a warning.
        max_unreadable_ratio (float): The largest share of loads skipped.
        min_attempts (int): Loads before the ratio is checked.
        **kwargs: Arguments of mmcv's ``LoadImageFromFile``, except
            ``ignore_empty`` (silent) and the deprecated ``file_client_args``.
    """

    def __init__(self,
                 skip_unreadable: bool = False,
                 max_unreadable_ratio: float = 0.01,
                 min_attempts: int = 100,
                 **kwargs) -> None:
        if kwargs.get('ignore_empty'):
            raise ValueError('CheckedLoadImageFromFile: use '
                             'skip_unreadable=True, not ignore_empty=True')
        if kwargs.get('file_client_args') is not None:
            raise ValueError('CheckedLoadImageFromFile: pass '
                             'file_client_args as backend_args')
        if not 0 <= max_unreadable_ratio < 1:
            raise ValueError(
                'CheckedLoadImageFromFile: max_unreadable_ratio must be in '
                f'[0, 1), got {max_unreadable_ratio}')
        super().__init__(**kwargs)
        self.skip_unreadable, self.min_attempts = skip_unreadable, min_attempts
        self.max_unreadable_ratio = max_unreadable_ratio
        self.num_attempts, self.unreadable = 0, []

    def transform(self, results: dict) -> Optional[dict]:
        filename = results['img_path']
        self.num_attempts += 1
        try:
            img = decode_image(filename, self.imdecode_backend,
                               self.color_type, self.backend_args)
        except UnreadableImageError as e:
            return self._unreadable(filename, str(e))
        results['img'] = img.astype('float32') if self.to_float32 else img
        results['img_shape'] = results['ori_shape'] = img.shape[:2]
        return results

    def _unreadable(self, filename: str, reason: str) -> None:
        dataset, folder = _calling_dataset()
        if not self.skip_unreadable:
            raise UnreadableImageError(
                f'Cannot load image {filename!r}: {reason}. Dataset: '
                f'{dataset}. Fix: list every unreadable file with `python '
                f'tools/misc/check_images.py {folder} --out bad.txt` and '
                'remove or replace them; or skip unreadable images while '
                'training with skip_unreadable=True on '
                'CheckedLoadImageFromFile (the folder config: --cfg-options '
                'train_dataloader.dataset.pipeline.0.skip_unreadable=True), '
                'which stops if more than max_unreadable_ratio of the loads '
                'fail.')
        self.unreadable.append(filename)
        failed, tried = len(self.unreadable), self.num_attempts
        if tried >= self.min_attempts and \
                failed > self.max_unreadable_ratio * tried:
            shown = ', '.join(self.unreadable[:5]) + (f' and {failed - 5} more'
                                                      if failed > 5 else '')
            raise UnreadableImageError(
                f'{failed} of the {tried} images this dataloader worker '
                f'loaded could not be read ({100 * failed / tried:.1f}%), '
                f'more than max_unreadable_ratio={self.max_unreadable_ratio}'
                f' (dataset: {dataset}): {shown}. Check the data with '
                f'`python tools/misc/check_images.py {folder}`.')
        print_log(
            f'CheckedLoadImageFromFile: skipped unreadable {filename!r} '
            f'({reason}). Unreadable so far in this worker: {failed} of '
            f'{tried} loads.',
            logger='current',
            level=logging.WARNING)
        return None

    def __repr__(self) -> str:
        return (super().__repr__()[:-1] +
                f', skip_unreadable={self.skip_unreadable}, '
                f'max_unreadable_ratio={self.max_unreadable_ratio}, '
                f'min_attempts={self.min_attempts})')


def _calling_dataset() -> Tuple[str, str]:
    """The calling dataset (from the stack) described, and its folder."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get('self')
        if isinstance(owner, BaseDataset):
            desc = f'{type(owner).__name__}(data_root={owner.data_root!r}'
            if getattr(owner, 'ann_file', ''):
                desc += f', ann_file={owner.ann_file!r}'
            return desc + f', {len(owner)} images)', owner.data_root or \
                'FOLDER'
        frame = frame.f_back
    return 'unknown', 'FOLDER'
