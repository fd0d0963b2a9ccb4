# Copyright (c) mocoplug contributors. All rights reserved.
"""Route one ``data_root=DIR`` option to the labelled folder datasets of a
config (``MoCoRunner.from_cfg`` calls :func:`fill_data_root`), checking
the folder, in ``CustomDataset`` layout (``DIR/train/cat/001.png``,
``DIR/val/cat/101.png``, ...)."""
import os
import os.path as osp
from typing import List

from mmengine.config import Config

from .image_check import IMAGE_EXTENSIONS as IMG_EXTENSIONS


def labelled_folder_classes(folder: str) -> List[str]:
    """The sorted class sub-folder names of ``folder``, with a clear error
    when it is missing or has no class sub-folders or no images."""
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
    return any(f.lower().endswith(IMG_EXTENSIONS)
               for _, _, files in os.walk(folder, followlinks=True)
               for f in files)


def fill_data_root(cfg: Config) -> int:
    """Copy ``cfg.data_root`` into the labelled ``CustomDataset`` of the
    dataloaders that leave their own ``data_root`` None, check their
    folders, and fill ``model.head.num_classes`` when it is None (in
    place); returns how many datasets received the folder."""
    from mocoplug.utils.walk_dicts import walk_dicts  # (circular import)
    datasets = []

    def collect(node: dict) -> None:
        if node.get('type') == 'CustomDataset' and node.get(
                'with_label', True) and node.get('data_root') is None:
            datasets.append(node)

    for key in cfg.keys():
        if key.endswith('_dataloader') and isinstance(cfg[key], dict):
            walk_dicts(cfg[key].get('dataset'), collect)
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
