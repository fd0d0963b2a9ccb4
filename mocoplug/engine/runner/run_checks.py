# Copyright (c) mocoplug contributors. All rights reserved.
"""What makes a run unable to train, refused before its first step and the
same on every rank (docs/guarantees.md, "Refused before training")."""
import os.path as osp
from typing import Optional

import numpy as np
import torch.nn as nn
from mmcv.transforms import LoadImageFromFile
from mmengine.dataset import InfiniteSampler
from mmengine.dist import get_world_size
from mmengine.logging import print_log
from mmpretrain.utils import get_ori_model

from mocoplug.datasets.image_check import (IMAGE_EXTENSIONS, file_format,
                                           tiff_is_planar)
from mocoplug.datasets.labelled_folder import has_image
from mocoplug.engine.hooks.runner_info import (loader_batch_size,
                                               mean_over_ranks)
from mocoplug.utils.config_options import walk_dicts

LAYOUT = ('a folder of images (sub-folders of any depth; with_label=True: '
          'one sub-folder per class), or the images an ann_file lists')
#: pipeline steps that treat an image as 8-bit RGB (as their repr shows)
RGB_ONLY = ('ColorJitter(', 'RandomGrayscale(', 'Solarize(', 'Posterize(',
            'Equalize(', 'AutoContrast(', 'backend=pillow')


def check_data_roots(dataloader, field: str = 'train_dataloader') -> None:
    """Every local ``data_root`` (with its ``data_prefix``; ImageNet's
    ``split``) of the loader config's datasets exists and holds a file of
    its ``extensions``, or its ``ann_file`` exists; else an error naming
    ``field`` on every rank (reduced over the ranks)."""
    found = []
    if isinstance(dataloader, dict):
        walk_dicts(dataloader.get('dataset'), found.append)
    problems = (
        _data_root_problem(d, field) for d in found if d.get('data_root'))
    problem = next(filter(None, problems), None)
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


def check_loop_trains(loop) -> None:
    """Refuse a train loop that would run no step or wait forever for a
    batch: no iteration (``max_iters`` 0) or a loader with no batch (a
    rank's share of the images smaller than its batch under
    ``drop_last=True``, or no image); decided alike on every rank."""
    loader = loop.dataloader
    try:  # batches a pass yields; an infinite sampler: 0 without images
        batches = len(loader.dataset) if isinstance(
            getattr(loader, 'sampler', None), InfiniteSampler) else len(loader)
    except TypeError:  # an iterable dataset or sampler without a length
        batches = None
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


def check_bands(loop, samples: int = 16) -> None:
    """Refuse training images whose bands or bit depth the pipeline's loader
    would drop (more bands than it decodes, more than 8 bits into an 8-bit
    decode) or, where it keeps them, that differ between files; read from
    the headers of ``samples`` files spread over the dataset, decided alike
    on every rank. 8-bit grayscale decoded as 3 channels is logged once;
    more than 3 bands or 8 bits kept are logged, or refused where a step of
    ``RGB_ONLY`` would treat them as 8-bit RGB."""
    dataset = loop.dataloader.dataset
    steps = list(getattr(getattr(dataset, 'pipeline', None), 'transforms', []))
    index = next(
        (i for i, t in enumerate(steps) if isinstance(t, LoadImageFromFile)),
        None)
    problem = None
    try:  # (a dataset this cannot read: no decision, on no rank)
        if index is not None and hasattr(dataset, 'get_data_info'):
            picks = np.linspace(0,
                                len(dataset) - 1, min(samples, len(dataset)))
            formats = {}
            for i in sorted(set(picks.round())):
                path = dataset.get_data_info(int(i)).get('img_path') or ''
                try:  # (an unreadable file is the loader's to report)
                    fmt = file_format(path) if '://' not in path else None
                except Exception:
                    fmt = None
                if fmt:
                    formats.setdefault(fmt, []).append(path)
            field = f'train_dataloader.dataset.pipeline.{index}'
            rgb = [op for op in RGB_ONLY if op in repr(dataset.pipeline)]
            problem = _band_problem(formats, steps[index], field, rgb, loop)
    except Exception:
        problem = None
    if mean_over_ranks([problem is not None])[0]:
        raise problem or ValueError(
            'train_dataloader.dataset: the images lose bands or bits on '
            'another rank (its error names them)')


def _band_problem(formats: dict, loader: LoadImageFromFile, field: str,
                  rgb: list, loop) -> Optional[Exception]:
    keeps = loader.color_type == 'unchanged' or \
        loader.imdecode_backend == 'tifffile'
    decoded = 1 if loader.color_type.startswith('grayscale') else 3
    where = (f'{field} ({type(loader).__name__}, color_type='
             f'{loader.color_type!r}, imdecode_backend='
             f'{loader.imdecode_backend!r})')

    def held(fmt):
        return (f'{fmt[0]} band(s) of {fmt[1]} bits (e.g. ' +
                ', '.join(osp.basename(p) for p in formats[fmt][:3]) + ')')

    lossy = [f for f in formats if f[0] > decoded or f[1] > 8]
    if lossy and not keeps:
        bands, bits = lossy[0]
        lost = ' and '.join(['bands would be dropped'] * (bands > decoded) +
                            ['values cut to 8 bits'] * (bits > 8))
        return ValueError(
            f'train_dataloader.dataset: the images hold {held(lossy[0])}, '
            f'but {where} decodes {decoded} band(s) of 8 bits: {lost}. '
            'Nothing is converted silently: to train on every band and bit, '
            'use the steps of configs/mocov2/mocov2_smallconv4-w32_1xb64-'
            'coslr-15e_multiband-folder.py (the files decoded as they are, '
            'per-band mean and std from tools/analysis_tools/band_stats.py, '
            'model.backbone.in_channels); to train on 8-bit renderings, '
            'write the images as 8-bit RGB or grayscale files first.')
    if len(formats) > 1 and keeps:
        return ValueError(
            'train_dataloader.dataset: the images differ in bands or bit '
            f'depth, which {where} keeps: ' +
            '; '.join(held(f) for f in sorted(formats)) +
            '. Make the folder hold one kind of image.')
    if lossy and rgb:
        return ValueError(
            f'train_dataloader.dataset: the images hold {held(lossy[0])}, '
            f'kept by {where}, but the pipeline has steps for 8-bit RGB '
            f'({", ".join(rgb)}): use the steps of '
            'configs/mocov2/mocov2_smallconv4-w32_1xb64-coslr-15e_'
            'multiband-folder.py (crop, blur, flip, per-band brightness and '
            "contrast; RandomResizedCrop with backend='cv2').")
    if lossy:
        print_log(
            f'the images hold {held(lossy[0])}, kept by {where}: the bands '
            'and bits reach the model', 'current')
    elif decoded == 3 and any(b == 1 for b, _ in formats):
        gray = next(f for f in formats if f[0] == 1)
        print_log(
            f'the images hold {held(gray)}: {where} decodes them as 3 equal '
            'channels (nothing lost; 1-channel training is not supported '
            'yet)', 'current')
    # where the loader keeps the files' bands: channel-first TIFFs (mmcv's
    # tifffile decode returns them so), a band count the model does not take
    if not formats or not keeps:
        return None
    bands = next(iter(formats))[0]
    if loader.imdecode_backend == 'tifffile':
        planar = [
            p for paths in formats.values() for p in paths
            if p.lower().endswith(('.tif', '.tiff')) and tiff_is_planar(p)
        ]
        if planar:
            return ValueError(
                f'train_dataloader.dataset: {osp.basename(planar[0])} stores '
                f'its bands before its rows (bands x H x W), which {field} '
                "(imdecode_backend='tifffile') decodes channel-first: write "
                "the TIFFs pixel-interleaved (tifffile.imwrite(..., "
                "planarconfig='contig'), GDAL INTERLEAVE=PIXEL).")
    model = get_ori_model(loop.runner.model)
    stem = next((m.in_channels for m in model.modules()
                 if isinstance(m, nn.Conv2d) and m.in_channels), None)
    mean = getattr(getattr(model, 'data_preprocessor', None), 'mean', None)
    takes = {stem, None if mean is None else mean.numel()} - {None}
    if takes and takes != {bands}:
        return ValueError(
            f'train_dataloader.dataset: the images hold {bands} band(s), '
            f'the model takes {sorted(takes)} (model.backbone.in_channels '
            f'{stem}, data_preprocessor.mean of '
            f'{None if mean is None else mean.numel()} values): set both '
            f'to the files\' (tools/analysis_tools/band_stats.py prints '
            'them).')
    return None
