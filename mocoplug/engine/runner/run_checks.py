# Copyright (c) mocoplug contributors. All rights reserved.
"""What makes a run unable to train, refused before its first step and the
same on every rank (docs/guarantees.md, "Refused before training")."""
import os.path as osp
from typing import Optional

from mmengine.dataset import InfiniteSampler
from mmengine.dist import get_world_size

from mocoplug.datasets.image_check import IMAGE_EXTENSIONS
from mocoplug.datasets.labelled_folder import has_image
from mocoplug.engine.hooks.runner_info import (loader_batch_size,
                                               mean_over_ranks)
from mocoplug.utils.config_options import walk_dicts

LAYOUT = ('a folder of images (sub-folders of any depth; with_label=True: '
          'one sub-folder per class), or the images an ann_file lists')


def check_data_roots(dataloader, field: str = 'train_dataloader') -> None:
    """Every local ``data_root`` (with its ``data_prefix``; ImageNet's
    ``split``) of the loader config's datasets exists and holds a file of
    its ``extensions``, or its ``ann_file`` exists; else an error naming
    ``field`` on every rank (reduced over the ranks)."""
    problem = None
    found = []
    if isinstance(dataloader, dict):
        walk_dicts(
            dataloader.get('dataset'), lambda d: found.append(d)
            if d.get('data_root') else None)
    for dataset in found:
        problem = problem or _data_root_problem(dataset, field)
    if mean_over_ranks([problem is not None])[0]:
        raise problem or FileNotFoundError(
            f'{field}.dataset.data_root: missing on another rank (its error '
            'names it)')


def _data_root_problem(dataset: dict, field: str) -> Optional[Exception]:
    root, split = str(dataset['data_root']), dataset.get('split')
    imagenet = str(dataset.get('type', '')).endswith('ImageNet')
    if '://' in root or (split and not imagenet):
        return None  # a file backend's URI; a split naming a list (CIFAR)
    prefix = dataset.get('data_prefix') or split or ''
    prefix = prefix.get('img_path', '') if isinstance(prefix, dict) else prefix
    folder, ann = osp.join(root, prefix), dataset.get('ann_file') or ''
    layout = ("ImageNet's: DATA_ROOT/train/n01440764/*.JPEG, ... "
              '(meta/train.txt optional)') if split else LAYOUT
    name = f'{field}.dataset.data_root={root!r}' + (
        f' (data_prefix {prefix!r})' if prefix else '')
    if ann:
        ann = ann if osp.isabs(ann) else osp.join(root, ann)
        return None if osp.isfile(ann) else FileNotFoundError(
            f'{name}: its ann_file {ann!r} does not exist. Set '
            f'{field}.dataset.data_root (and ann_file) to the data set, or '
            f"ann_file='' for {layout}.")
    if not osp.isdir(folder):
        return FileNotFoundError(
            f'{name}: the folder {folder!r} does not exist. Set '
            f'{field}.dataset.data_root to {layout} (--cfg-options '
            f'{field}.dataset.data_root=/path/to/images).')
    extensions = dataset.get('extensions') or IMAGE_EXTENSIONS
    if not has_image(folder, tuple(extensions)):
        return ValueError(f'{name}: {folder!r} holds no file of the '
                          f'extensions {", ".join(extensions)}. Set '
                          f'{field}.dataset.data_root to {layout}.')
    return None


def batches_per_pass(loader) -> Optional[int]:
    """Batches a pass of this rank's loader yields: None for an infinite
    sampler over images (it always fills a batch), 0 for one over none."""
    sampler = getattr(loader, 'sampler', None)
    try:
        if isinstance(sampler, InfiniteSampler):
            return None if len(loader.dataset) else 0
        return len(loader)
    except TypeError:  # an iterable dataset or sampler without a length
        return None


def check_loop_trains(loop) -> None:
    """Refuse a train loop that would run no step or wait forever for a
    batch: no iteration (``max_iters`` 0) or a loader with no batch (a
    rank's share of the images smaller than its batch under
    ``drop_last=True``, or no image); decided alike on every rank."""
    loader = loop.dataloader
    batches = batches_per_pass(loader)
    empty, no_iters = mean_over_ranks([batches == 0, loop.max_iters == 0])
    if empty:
        world, batch = get_world_size(), loader_batch_size(loader)
        sampler = getattr(loader.batch_sampler, 'sampler', loader.sampler)
        try:
            images, share = len(loader.dataset), len(sampler)
        except TypeError:
            images = share = 0
        drop = getattr(loader.batch_sampler, 'drop_last', loader.drop_last)
        raise ValueError(
            f'train_dataloader yields no batch: {images} images over {world} '
            f'process(es), {share} a process, fewer than '
            f'train_dataloader.batch_size={batch} with drop_last={drop}, so '
            'no iteration would run (an iteration loop would wait forever). '
            f'Use a batch_size of at most {max(share, 1)} a process, fewer '
            f'processes, or at least {batch * world} images'
            f'{" (the folder holds none)" if not images else ""}.')
    if no_iters:
        raise ValueError(
            'train_cfg gives 0 iterations (max_epochs or max_iters is 0, '
            'or the schedule ends before it begins): nothing would train. '
            'Set train_cfg.max_epochs (or max_iters) to at least 1.')
