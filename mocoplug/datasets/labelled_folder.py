# Copyright (c) mocoplug contributors. All rights reserved.
"""Evaluate on your own labelled images: route one ``data_root=DIR``
option to the folder datasets of a config, and check the folder first.

The layout is mmpretrain's ``CustomDataset`` one, one sub-folder per class
(its name is the class), for each split::

    DIR/train/cat/001.png   DIR/val/cat/101.png
    DIR/train/dog/002.jpg   DIR/val/dog/102.jpg

As with ``pretrained`` (see :mod:`mocoplug.utils.pretrained`), mmengine
resolves config variables when the file is read, so ``--cfg-options
data_root=DIR`` changes only the top-level key; :func:`fill_data_root`
(called by ``MoCoRunner.from_cfg``, the configs' runner) copies it into every
labelled ``CustomDataset`` of the config's dataloaders that leaves its own
``data_root`` None, and, when the config leaves it None, sets the
classifier's ``num_classes`` from the class folders.
"""
import os
import os.path as osp
from typing import Any, List

from mmengine.config import Config

# The image files mmpretrain's CustomDataset reads (from its signature).
from .image_check import IMAGE_EXTENSIONS as IMG_EXTENSIONS


def labelled_folder_classes(folder: str) -> List[str]:
    """The classes of a labelled folder, with a clear error when it is not
    one (missing, no class sub-folders, no images).

    Args:
        folder (str): A folder with one sub-folder of images per class.

    Returns:
        List[str]: The class names (sub-folder names), sorted as
        mmpretrain's ``CustomDataset`` sorts them.
    """
    if not osp.isdir(folder):
        raise FileNotFoundError(
            f'Labelled folder {folder!r} does not exist. Expected one '
            'sub-folder of images per class (mmpretrain CustomDataset '
            'layout): FOLDER/class_a/xxx.png, FOLDER/class_b/yyy.png, ...')
    classes = sorted(
        entry.name for entry in os.scandir(folder)
        if entry.is_dir() and not entry.name.startswith('.'))
    if not classes:
        loose = [
            f for f in os.listdir(folder) if f.lower().endswith(IMG_EXTENSIONS)
        ]
        hint = (f' It holds {len(loose)} images directly: move them into '
                'one sub-folder per class.' if loose else '')
        raise ValueError(
            f'Labelled folder {folder!r} has no class sub-folders.{hint} '
            'Expected FOLDER/class_a/xxx.png, FOLDER/class_b/yyy.png, ... '
            '(mmpretrain CustomDataset layout; the sub-folder names are '
            'the labels).')
    if not any(_has_image(osp.join(folder, c)) for c in classes):
        raise ValueError(
            f'Labelled folder {folder!r}: its class sub-folders {classes} '
            f'hold no images (extensions {", ".join(IMG_EXTENSIONS)}).')
    return classes


def _has_image(folder: str) -> bool:
    for _, _, files in os.walk(folder, followlinks=True):
        if any(f.lower().endswith(IMG_EXTENSIONS) for f in files):
            return True
    return False


def _folder_datasets(node: Any, found: List[dict]) -> List[dict]:
    """The labelled CustomDataset dicts under a config node."""
    if isinstance(node, dict):
        if node.get('type') == 'CustomDataset' and node.get(
                'with_label', True):
            found.append(node)
        for value in node.values():
            _folder_datasets(value, found)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _folder_datasets(value, found)
    return found


def fill_data_root(cfg: Config) -> int:
    """Copy ``cfg.data_root`` into the labelled ``CustomDataset``
    dataloaders that leave their own ``data_root`` None (the ``*_folder``
    evaluation configs do), check their folders, and fill
    ``model.head.num_classes`` when it is None.

    Datasets with a ``data_root`` of their own are not touched, so the
    ``data_root`` variable of mmpretrain's ImageNet configs changes nothing.

    Args:
        cfg (Config): The config; changed in place.

    Returns:
        int: How many datasets received the folder.
    """
    datasets = []
    for key in cfg.keys():
        if key.endswith('_dataloader') and isinstance(cfg[key], dict):
            datasets += [
                d for d in _folder_datasets(cfg[key].get('dataset'), [])
                if d.get('data_root') is None
            ]
    if not datasets:
        return 0
    root = cfg.get('data_root', None)
    if not root:
        raise ValueError(
            'This config evaluates on a labelled folder: give it with '
            '--cfg-options data_root=/path/to/folder (the folder holds '
            'train/ and val/, each with one sub-folder of images per '
            'class).')
    classes = {}
    for dataset in datasets:
        dataset['data_root'] = root
        folder = osp.join(root, dataset.get('data_prefix', '') or '')
        classes[folder] = labelled_folder_classes(folder)
    names = list(classes.values())
    if any(c != names[0] for c in names[1:]):
        raise ValueError(
            f'The splits of {root!r} have different class folders: ' +
            '; '.join(f'{f}: {c}' for f, c in classes.items()) +
            '. Every split needs the same class sub-folders, or the label '
            'indices would not match.')
    head = cfg.get('model', {}).get('head') or {}
    if 'num_classes' in head:
        if head['num_classes'] is None:
            head['num_classes'] = len(names[0])
        elif head['num_classes'] != len(names[0]):
            raise ValueError(
                f'model.head.num_classes={head["num_classes"]} but '
                f'{root!r} has {len(names[0])} class folders; leave '
                'num_classes None to take it from the folders.')
    return len(datasets)
