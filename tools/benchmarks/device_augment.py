# Copyright (c) mocoplug contributors. All rights reserved.
"""Per-image cost of the device augmentation (``--decode``: and decoding)
at each of ``--batches``; ``--e2e``: images/s of short runs per path."""
import os
import os.path as osp
import tempfile
from typing import List

import torch
from mmengine.config import Config
from mmengine.dataset import Compose, default_collate
from mmengine.registry import RUNNERS, DefaultScope

import mocoplug  # noqa: F401  (registers everything)
from mocoplug.registry import MODELS
from mocoplug.utils import use_device_augmentation
from .common import (CONFIGS, DIGITS, cpu_name, load_average, markdown_table,
                     median_ms, parser, quiet_cfg, write_json)
from .pipeline import make_images  # noqa: F401  (tools/gpu_check.py)

V2_DEVICE = osp.join(CONFIGS,
                     'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-aug.py')
V2_DECODE = osp.join(
    CONFIGS, 'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-decode.py')
FOLDER = osp.join(CONFIGS, 'mocov2/mocov2_r50_8xb32-coslr-200e_folder.py')


def build_preprocessor(config: str, device: torch.device):
    with DefaultScope.overwrite_default_scope('mocoplug'):
        preprocessor = MODELS.build(Config.fromfile(config).data_preprocessor)
    return preprocessor.to(device)


def batched_costs(batch: int, device: torch.device, rounds: int) -> dict:
    """ms per image (2 views) of the v2 preprocessor, and per step."""
    preprocessor = build_preprocessor(V2_DEVICE, device)
    gen = torch.Generator().manual_seed(0)
    views = [
        torch.randint(
            0, 256, (batch, 3, 224, 224), generator=gen,
            dtype=torch.uint8).to(device) for _ in range(2)
    ]
    total = median_ms(lambda: preprocessor(dict(inputs=views), True), device,
                      rounds, 1)
    augment = preprocessor.view_augments[0]
    params = augment.sample(batch, preprocessor._generator_on(device), device)
    images = views[0].float()
    steps = {}
    for op, p in zip(augment.ops, params):
        ms = median_ms(lambda: op(images, p), device, rounds, 1)
        steps[type(op).__name__] = round(ms / batch, 3)
    return dict(
        device=str(device),
        batch=batch,
        ms_per_image=round(total / batch, 3),
        ms_per_view_per_step=steps)


def encoded_batch(paths: List[str], batch: int) -> dict:
    """A collated batch of the _device-decode pipeline's worker output."""
    with DefaultScope.overwrite_default_scope('mocoplug'):
        pipeline = Compose(
            Config.fromfile(V2_DECODE).train_dataloader.dataset.pipeline)
    return default_collate([
        pipeline(dict(img_path=paths[i % len(paths)], sample_idx=i))
        for i in range(batch)
    ])


def decode_costs(batch: int, device: torch.device, rounds: int,
                 paths: List[str]) -> dict:
    preprocessor = build_preprocessor(V2_DECODE, device)
    data = encoded_batch(paths, batch)
    total = median_ms(lambda: preprocessor(data, True), device, rounds, 1)
    return dict(
        device=str(device), batch=batch, ms_per_image=round(total / batch, 3))


def resnet18_folder_cfg(path: str, data_root: str, batch: int) -> Config:
    """MoCo v2, ResNet-18, 64 px crops, batch ``batch``, SplitBN."""
    cfg = Config.fromfile(FOLDER)
    cfg.model.backbone.depth = 18
    cfg.model.neck.in_channels = cfg.model.neck.hid_channels = 512
    cfg.model.queue.size = 4096
    cfg.model.shuffle_bn, cfg.model.num_splits = 'split', 4
    for view in cfg.train_dataloader.dataset.pipeline[1].transforms:
        view[0].scale = 64
    cfg.train_dataloader.dataset.data_root = data_root
    cfg.train_dataloader.batch_size = batch
    return on_path(cfg, path)


def on_path(cfg: Config, path: str) -> Config:
    """``cfg`` on the augmentation path ``path`` (per-image: unchanged)."""
    return cfg if path == 'per-image' else use_device_augmentation(
        cfg, path == 'device-decode')


def end_to_end(iters: int, warmup: int, folder: str, batch: int) -> List[dict]:
    runs = [('digits', p, lambda p=p: on_path(Config.fromfile(DIGITS), p))
            for p in ('per-image', 'device-aug')]
    runs += [('resnet18-64px-folder', p,
              lambda p=p: resnet18_folder_cfg(p, folder, batch))
             for p in ('per-image', 'device-aug', 'device-decode')]
    rows = []
    for name, path, make in runs:
        for workers in (0, 1, 2):
            with tempfile.TemporaryDirectory() as work_dir:
                cfg = quiet_cfg(make(), work_dir, iters, 'ERROR')
                cfg.randomness = dict(seed=0)
                cfg.train_dataloader.update(
                    num_workers=workers,
                    persistent_workers=workers > 0,
                    sampler=dict(type='InfiniteSampler', shuffle=True))
                cfg.env_cfg = dict(dist_cfg=dict(backend='gloo'))
                cfg.experiment_name = f'{name}-{path}-{workers}-{os.getpid()}'
                runner = RUNNERS.build(cfg)
                runner.train()
            seconds = runner.message_hub.get_scalar('train/time').data[0]
            size = cfg.train_dataloader.batch_size
            rate = round((iters - warmup) * size / seconds[warmup:].sum(), 1)
            rows.append(
                dict(
                    run=name,
                    path=path,
                    workers=workers,
                    batch=size,
                    images_per_s=rate))
            print(
                f'  {name} {path} workers={workers}: {rate} images/s',
                flush=True)
    return rows


def main(argv=None):
    p = parser(
        __doc__,
        'device-augment',
        device=False,
        rounds=3,
        threads=1,
        iters=20,
        warmup=5,
        e2e_batch=32)  # of the ResNet-18 folder runs
    p.add_argument('--batches', type=int, nargs='+', default=[32, 256])
    p.add_argument('--decode', action='store_true')  # decoding on the device
    p.add_argument('--e2e', action='store_true')  # short training runs
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    devices = [torch.device('cpu')] + ([torch.device('cuda')]
                                       if torch.cuda.is_available() else [])
    result = dict(
        cpu=cpu_name(),
        cuda=torch.cuda.get_device_name() if len(devices) > 1 else None,
        threads=args.threads,
        torch=torch.__version__,
        load_average_before=load_average())
    print(f'CPU threads {args.threads}; CUDA: {result["cuda"]}; load '
          f'average {result["load_average_before"]}')
    result['batched'] = [
        batched_costs(b, d, args.rounds) for d in devices for b in args.batches
    ]
    rows = []
    for r in result['batched']:
        steps = r['ms_per_view_per_step'].items()
        rows.append(dict(r, steps=', '.join(f'{k} {v}' for k, v in steps)))
    columns = dict(device='device', batch='batch', ms_per_image='ms per image')
    print('\nBatched augmentation of the MoCo v2 recipe (2 views of 224 px '
          'per image), median ms:\n')
    by_step = dict(columns, steps='ms per image per view, by step')
    print(markdown_table(rows, by_step))
    with tempfile.TemporaryDirectory() as folder:
        paths = make_images(folder, 64)
        if args.decode:
            result['decode'] = [
                decode_costs(b, d, args.rounds, paths) for d in devices
                for b in args.batches
            ]
            print('\nDecoding, cropping and augmenting on the device '
                  '(_device-decode), median ms per image:\n')
            print(markdown_table(result['decode'], columns))
        if args.e2e:
            print('\nEnd to end (images/s after the first '
                  f'{args.warmup} of {args.iters} iterations):')
            result['end_to_end'] = end_to_end(args.iters, args.warmup, folder,
                                              args.e2e_batch)
            columns = {k: k for k in ('run', 'path', 'workers', 'batch')}
            print('\n' + markdown_table(
                result['end_to_end'], dict(columns, images_per_s='images/s')))
    result['load_average_after'] = load_average()
    print(f'\nload average after: {result["load_average_after"]}')
    write_json(result, args.out)
    return result
