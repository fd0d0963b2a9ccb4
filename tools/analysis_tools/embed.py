# Copyright (c) mocoplug contributors. All rights reserved.
"""Embed every image of a folder (recursive, no labels needed) with the
query encoder of a MoCo checkpoint, or with the same network at random init
(CHECKPOINT ``none``): pooled backbone features and projection embeddings,
with the paths, in one .npz (docs/user_guides/evaluation.md)."""
import argparse
import csv
import os
import os.path as osp
import shutil
import zipfile
from functools import partial
from typing import List

import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import (Compose, DefaultSampler, default_collate,
                              worker_init_fn)
from mmengine.dist import all_gather_object, get_dist_info
from mmengine.registry import DefaultScope
from mmengine.runner import set_random_seed
from torch.utils.data import DataLoader, Dataset

import mocoplug  # noqa: F401
from mocoplug.datasets.image_check import (check_image, find_images,
                                           quiet_decoder_warnings)
from mocoplug.engine.runner.cpu_distributed import init_dist_for_this_machine
from mocoplug.evaluation import (extract_feature_shard, gather_feature_shards,
                                 pool_feature)
from mocoplug.registry import MODELS
from mocoplug.utils import parse_launch_args, walk_dicts


class ImageFiles(Dataset):
    """``pipeline`` on each of ``paths`` (``sample_idx``: its index)."""

    def __init__(self, paths: List[str], pipeline: List[dict]) -> None:
        self.paths = paths
        with DefaultScope.overwrite_default_scope('mocoplug'):
            self.pipeline = Compose(pipeline)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> dict:
        return self.pipeline(
            dict(img_path=self.paths[index], sample_idx=index))


class RowFile:
    """A float32 .npy file of ``shape`` written row block by row block, in
    order: the rows are never all in memory."""

    def __init__(self, path: str, shape: tuple) -> None:
        self.path, self.shape = path, shape
        self.file = open(path, 'wb')
        np.lib.format.write_array_header_2_0(
            self.file, dict(descr='<f4', fortran_order=False, shape=shape))
        self.header = self.file.tell()

    def append(self, rows: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(rows, '<f4').tobytes())

    def close(self) -> None:
        """Close; RuntimeError unless every row of ``shape`` came."""
        if self.file.closed:
            return
        written = self.file.tell()
        self.file.close()
        expected = 4 * int(np.prod(self.shape))
        if written - self.header != expected:
            raise RuntimeError(f'{self.path}: {written - self.header} bytes '
                               f'of rows for shape {self.shape} ({expected})')


def crop_size(cfg: Config) -> int:
    """The training crop (the first ``RandomResizedCrop``'s), else 224."""
    sizes = []  # view_pipeline is part of train_dataloader by now
    walk_dicts(
        cfg.get('train_dataloader'), lambda d: sizes.append(d.get('scale'))
        if d.get('type') == 'RandomResizedCrop' else None)
    return next((s for s in sizes if isinstance(s, int)), 224)


def pipelines(cfg: Config, size: int) -> dict:
    """The evaluation view (short edge to size x 8/7, centre crop) and, if
    the config has ``view_pipeline``, one training view."""
    center = [
        dict(type='ResizeEdge', scale=round(size * 8 / 7), edge='short'),
        dict(type='CenterCrop', crop_size=size)
    ]
    views = dict(center=center, view=cfg.get('view_pipeline'))
    return {  # one view, as the MoCo data preprocessors read views
        name: [
            dict(type='LoadImageFromFile'),
            dict(type='MultiView', num_views=1, transforms=[view]),
            dict(type='PackInputs')
        ]
        for name, view in views.items() if view
    }


def checked_images(root: str) -> tuple:
    """The images under ``root`` that decode, and the others with the
    reason (each rank checks its share)."""
    paths = find_images(root)
    if not paths:
        raise SystemExit(f'--data-root {root!r}: no image under it')
    rank, world_size = get_dist_info()
    quiet_decoder_warnings()
    mine = {p: check_image(p) for p in paths[rank::world_size]}
    if world_size > 1:
        for other in all_gather_object(mine):
            mine.update(other)
    bad = [(p, mine[p]) for p in paths if mine[p] is not None]
    return [p for p in paths if mine[p] is None], bad


def at_least(low: int):
    """An argparse type: an int of at least ``low``."""

    def parse(text: str) -> int:
        if int(text) < low:
            raise argparse.ArgumentTypeError(f'{text} < {low}')
        return int(text)

    return parse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='the pretraining config')
    parser.add_argument('checkpoint', help='a checkpoint, or none')
    parser.add_argument('--data-root', required=True, help='image folder')
    parser.add_argument('--out', required=True, help='.npz (or .csv) file')
    parser.add_argument('--format', choices=('npz', 'csv'), default='npz')
    parser.add_argument('--size', type=int, help='crop (default: training)')
    parser.add_argument(
        '--views',
        type=at_least(0),
        help='training views per image (npz only; default 1)')
    parser.add_argument('--batch-size', type=at_least(1), default=64)
    parser.add_argument('--workers', type=at_least(0), default=2)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument(
        '--chunk',
        type=at_least(1),
        default=4096,
        help='images per pass: memory holds one chunk of features')
    args = parse_launch_args(parser, argv)
    if args.format == 'csv' and args.views:
        parser.error('--views: the csv holds no training views (npz does)')
    args.views = (1 if args.format == 'npz' else 0) if args.views is None \
        else args.views
    return args


def main(argv=None):
    """Embed the folder; on rank 0 the file written (an ``NpzFile``, None
    for a csv), on the other ranks None."""
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    if not osp.isdir(args.data_root):
        raise SystemExit(f'--data-root {args.data_root!r} is not a folder')
    if args.launcher != 'none':
        init_dist_for_this_machine(args.launcher,
                                   cfg.get('env_cfg', {}).get('dist_cfg'))
    good, bad = checked_images(args.data_root)
    for path, reason in bad:
        print(f'not embedded: {path}: {reason}')
    if not good:
        raise SystemExit(f'--data-root {args.data_root!r}: no image under '
                         'it could be read (listed above)')
    torch.manual_seed(args.seed)  # `none`: the same random init every time
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        model_cfg = cfg.model.copy()
        if 'data_preprocessor' in cfg:  # as the Runner gives it
            model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
        model_cfg.encoders_from = None if args.checkpoint == 'none' \
            else args.checkpoint
        model = MODELS.build(model_cfg)
        model.init_weights()
    model = model.cuda() if torch.cuda.is_available() else model
    dims = {}

    def features(inputs):  # pooled backbone | projection, one row
        feats = model.backbone(inputs[0])  # the one view
        pooled = pool_feature(feats)
        dims['backbone'] = pooled.shape[1]
        return torch.cat([pooled, model.neck(feats)[0].flatten(1)], dim=1)

    rank, world_size = get_dist_info()
    parts = args.out + '.parts'  # rank 0's rows, on disk until the end
    if rank == 0:
        os.makedirs(parts, exist_ok=True)
    files = {}

    def embed(pipeline, name, view=0, views=0):
        """Every image's backbone|embedding row, ``args.chunk`` images at
        a time; rank 0 appends them to .npy files (a training view:
        ``view`` of ``views``, one file for all of them)."""
        lead = (views, len(good)) if views else (len(good), )
        for start in range(0, len(good), args.chunk):
            sequence = np.random.SeedSequence([args.seed, view, rank, start])
            seed = int(sequence.generate_state(1)[0] >> 1)
            dataset = ImageFiles(good[start:start + args.chunk], pipeline)
            loader = DataLoader(
                dataset,
                args.batch_size,
                sampler=DefaultSampler(dataset, shuffle=False),
                num_workers=args.workers,
                collate_fn=default_collate,
                worker_init_fn=partial(
                    worker_init_fn, num_workers=0, rank=0, seed=seed))
            set_random_seed(seed)
            shard = extract_feature_shard(
                model,
                loader,
                features,
                progress=f'{name}, images {start + 1}-'
                f'{start + len(dataset)} of {len(good)}',
                labelled=False)
            rows = gather_feature_shards(shard).feats.numpy()
            if rank != 0:
                continue
            cut = dims['backbone']
            blocks = dict(views=rows) if views else dict(
                backbone=rows[:, :cut], embedding=rows[:, cut:])
            for key, block in blocks.items():
                if key not in files:
                    path = osp.join(parts, key + '.npy')
                    files[key] = RowFile(path, lead + block.shape[1:])
                files[key].append(block)

    size = args.size or crop_size(cfg)
    ways = pipelines(cfg, size)
    num_views = args.views if 'view' in ways else 0
    try:
        embed(ways['center'], 'embed')
        for v in range(num_views):
            embed(ways['view'], f'view {v + 1}', v + 1, num_views)
        return write(args, files, good, bad, size,
                     num_views) if rank == 0 else None
    finally:  # (after an error too)
        for f in files.values():
            f.file.close()
        if rank == 0:
            shutil.rmtree(parts, ignore_errors=True)


def write(args, files: dict, good: List[str], bad: list, size: int,
          num_views: int):
    """The output file from rank 0's row files; its NpzFile (None: csv)."""
    world_size = get_dist_info()[1]
    width, rest = (files[k].shape[-1] for k in ('backbone', 'embedding'))
    small = dict(
        paths=np.array([osp.relpath(p, args.data_root) for p in good]),
        width=width,
        unreadable=np.array([osp.relpath(p, args.data_root) for p, _ in bad]),
        reasons=np.array([r for _, r in bad]),
        root=osp.abspath(args.data_root),
        checkpoint=args.checkpoint,
        config=osp.abspath(args.config),
        size=size,
        processes=world_size)
    if not num_views:
        small['views'] = np.zeros((0, len(good), width + rest), np.float32)
    for f in files.values():
        f.close()
    if args.format == 'npz':
        with open(args.out, 'wb') as out:  # (np.savez would add .npz)
            np.savez(out, **small)
        with zipfile.ZipFile(args.out, 'a', allowZip64=True) as npz:
            for key, f in files.items():  # copied in blocks, not loaded
                npz.write(f.path, key + '.npy')
    else:
        mapped = (
            np.load(files[k].path, mmap_mode='r')
            for k in ('backbone', 'embedding'))
        with open(args.out, 'w', newline='') as out:
            rows = csv.writer(out)
            rows.writerow(['path'] + [f'b{i}' for i in range(width)] +
                          [f'e{i}' for i in range(rest)])
            rows.writerows([path, *(f'{x:.7g}' for x in (*b, *e))]
                           for path, b, e in zip(small['paths'], *mapped))
    print(f'embedded {len(good)} images of {args.data_root} ({size} px, '
          f'backbone {width}, projection {rest}, {num_views} training '
          f'views, {world_size} processes); {len(bad)} not readable; wrote '
          f'{args.out}')
    return np.load(args.out) if args.format == 'npz' else None


if __name__ == '__main__':
    main()
