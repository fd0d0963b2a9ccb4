# Copyright (c) mocoplug contributors. All rights reserved.
"""Route one ``data_root=DIR`` option to a config's labelled folder datasets
(``CustomDataset`` layout: ``DIR/train/cat/001.png``), checking it."""
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
            f'Labelled folder {folder!r} does not exist. Expected '
            'FOLDER/class_a/xxx.png, FOLDER/class_b/yyy.png, ...')
    classes = sorted(e.name for e in os.scandir(folder) if e.is_dir())
    hidden = [name for name in classes if name.startswith('.')]
    if hidden:  # mmpretrain's CustomDataset takes them as classes
        raise ValueError(
            f'Labelled folder {folder!r} holds hidden folders {hidden}, which '
            "mmpretrain's CustomDataset reads as classes (shifting the label "
            'of every class after them): remove them or move them out.')
    if not classes:
        loose = sum(f.lower().endswith(IMG_EXTENSIONS)
                    for f in os.listdir(folder))
        hint = (f' It holds {loose} images directly: move them into '
                'one sub-folder per class.' if loose else '')
        raise ValueError(
            f'Labelled folder {folder!r} has no class sub-folders.{hint} '
            'Expected FOLDER/class_a/xxx.png, FOLDER/class_b/yyy.png, ...')
    if not any(has_image(osp.join(folder, c)) for c in classes):
        raise ValueError(
            f'Labelled folder {folder!r}: its class sub-folders {classes} '
            f'hold no images (extensions {", ".join(IMG_EXTENSIONS)}).')
    return classes


def has_image(folder: str, extensions=IMG_EXTENSIONS) -> bool:
    """Whether ``folder`` (links followed) holds a file of ``extensions``."""
    extensions = tuple(e.lower() for e in extensions)
    return any(f.lower().endswith(extensions)
               for _, _, files in os.walk(folder, followlinks=True)
               for f in files)


def fill_data_root(cfg: Config) -> int:
    """Copy ``cfg.data_root`` into the labelled ``CustomDataset`` without
    one, check them, fill a None ``model.head.num_classes`` (in place);
    returns how many datasets received the folder."""
    from mocoplug.utils.config_options import walk_dicts  # (circular)
    nodes = []
    for key in cfg.keys():
        if key.endswith('_dataloader') and isinstance(cfg[key], dict):
            walk_dicts(cfg[key].get('dataset'), nodes.append)
    datasets = [
        n for n in nodes if n.get('type') == 'CustomDataset'
        and n.get('with_label', True) and n.get('data_root') is None
    ]
    if not datasets:
        return 0
    root = cfg.get('data_root', None)
    if not root:
        raise ValueError(
            'This config evaluates on a labelled folder: give it with '
            '--cfg-options data_root=/path/to/folder (train/ and val/, each '
            'with one sub-folder of images per class).')
    classes = {}
    for dataset in datasets:
        dataset['data_root'] = root
        folder = osp.join(root, dataset.get('data_prefix', '') or '')
        classes[folder] = labelled_folder_classes(folder)
    names = list(classes.values())
    if any(c != names[0] for c in names[1:]):
        raise ValueError(
            f'The splits of {root!r} have different class folders: ' +
            '; '.join(f'{f}: {c}' for f, c in classes.items()))
    head = cfg.get('model', {}).get('head') or {}
    if 'num_classes' in head:
        if head['num_classes'] is None:
            head['num_classes'] = len(names[0])
        elif head['num_classes'] != len(names[0]):
            raise ValueError(
                f'model.head.num_classes={head["num_classes"]} but {root!r} '
                f'has {len(names[0])} class folders; leave it None.')
    return len(datasets)
