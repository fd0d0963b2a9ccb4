# Copyright (c) mocoplug contributors. All rights reserved.
"""Cost of the device augmentation path, and training speed per path.

1. Batched operations: DeviceAugmentDataPreprocessor of the MoCo v2
   ``_device-aug`` config on two 224 px views of random uint8 images, per
   image (2 views), at batch 32 and 256 on the CPU (``--threads`` threads)
   and on CUDA when available; each photometric step of the first view
   separately; and, with ``--decode``, the ``_device-decode`` preprocessor
   on ImageNet-sized JPEGs (decode + crop + augment). Medians over
   ``--rounds`` after one warm-up round.
2. End to end (``--e2e``): images/s of short training runs, per path
   (per-image pipeline, device augmentation, and for folders decoding on
   the device) and data-loader workers 0, 1, 2: the digits demo config and
   MoCo v2 with a ResNet-18 at 64 px on a folder of ImageNet-sized JPEGs
   cut from scikit-learn's photos. Images/s over the iterations after the
   first ``--warmup`` ones.

    python tools/benchmarks/benchmark.py device-augment [--batches 32 256] \\
        [--rounds 3] [--threads 1] [--decode] [--e2e] [--iters 20] \\
        [--out results.json]
"""
import argparse
import os
import os.path as osp
import tempfile
import time
from typing import List

import torch
from mmengine.config import Config
from mmengine.dataset import default_collate
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS, DefaultScope

import mocoplug  # noqa: F401  (registers everything)
from mocoplug.registry import MODELS, TRANSFORMS
from mocoplug.utils import use_device_augmentation
from .common import (CONFIGS, cpu_name, load_average, markdown_table,
                     median_ms, write_json)
from .pipeline import make_images

V2_DEVICE = osp.join(CONFIGS,
                     'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-aug.py')
V2_DECODE = osp.join(
    CONFIGS, 'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-decode.py')
DIGITS = osp.join(
    CONFIGS, 'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
FOLDER = osp.join(CONFIGS, 'mocov2/mocov2_r50_8xb32-coslr-200e_folder.py')


def build_preprocessor(config: str, device: torch.device):
    cfg = Config.fromfile(config)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        preprocessor = MODELS.build(cfg.data_preprocessor)
    return preprocessor.to(device), cfg


def batched_costs(batches: List[int], devices: List[torch.device],
                  rounds: int) -> List[dict]:
    """ms per image (2 views) of the v2 preprocessor, and per step."""
    rows = []
    for device in devices:
        preprocessor, _ = build_preprocessor(V2_DEVICE, device)
        for batch in batches:
            gen = torch.Generator().manual_seed(0)
            views = [
                torch.randint(
                    0,
                    256, (batch, 3, 224, 224),
                    generator=gen,
                    dtype=torch.uint8).to(device) for _ in range(2)
            ]
            total = median_ms(
                lambda: preprocessor(dict(inputs=views), True),
                device,
                rounds,
                warmup=1)
            augment = preprocessor.view_augments[0]
            generator = preprocessor._generator_on(device)
            params = augment.sample(batch, generator, device)
            images = views[0].float()
            steps = {}
            for op, op_params in zip(augment.ops, params):
                steps[type(op).__name__] = round(
                    median_ms(lambda: op(images, op_params), device, rounds, 1)
                    / batch, 3)
            rows.append(
                dict(
                    device=str(device),
                    batch=batch,
                    ms_per_image=round(total / batch, 3),
                    ms_per_view_per_step=steps))
    return rows


def encoded_batch(paths: List[str], batch: int) -> dict:
    """A collated batch of the _device-decode pipeline's worker output."""
    cfg = Config.fromfile(V2_DECODE)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        steps = [
            TRANSFORMS.build(t) for t in cfg.train_dataloader.dataset.pipeline
        ]
    samples = []
    for i in range(batch):
        results = dict(img_path=paths[i % len(paths)], sample_idx=i)
        for step in steps:
            results = step(results)
        samples.append(results)
    return default_collate(samples)


def decode_costs(batches: List[int], devices: List[torch.device], rounds: int,
                 paths: List[str]) -> List[dict]:
    rows = []
    for device in devices:
        preprocessor, _ = build_preprocessor(V2_DECODE, device)
        for batch in batches:
            data = encoded_batch(paths, batch)
            total = median_ms(lambda: preprocessor(data, True), device, rounds,
                              1)
            rows.append(
                dict(
                    device=str(device),
                    batch=batch,
                    ms_per_image=round(total / batch, 3)))
    return rows


class Throughput(Hook):
    """Wall time of the iterations after the first ``warmup``."""
    priority = 'VERY_LOW'

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.start = self.end = None

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == self.warmup:
            self.start = time.perf_counter()

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None):
        self.end = time.perf_counter()


def quiet(cfg: Config, work_dir: str, iters: int, workers: int) -> Config:
    """An iteration-based run without checkpoints, logs or monitors."""
    cfg.work_dir = work_dir
    cfg.log_level = 'ERROR'
    cfg.randomness = dict(seed=0)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters)
    cfg.param_scheduler = []
    cfg.custom_hooks = [
        h for h in cfg.custom_hooks if h['type'] == 'MomentumUpdateHook'
    ]
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook', interval=10**9, save_last=False)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=10**9)
    loader = cfg.train_dataloader
    loader.num_workers = workers
    loader.persistent_workers = workers > 0
    loader.sampler = dict(type='InfiniteSampler', shuffle=True)
    cfg.env_cfg = dict(dist_cfg=dict(backend='gloo'))
    return cfg


def digits_cfg(path: str) -> Config:
    cfg = Config.fromfile(DIGITS)
    if path != 'per-image':
        use_device_augmentation(cfg)
    return cfg


def resnet18_folder_cfg(path: str, data_root: str, batch: int) -> Config:
    """MoCo v2, ResNet-18, 64 px crops, batch ``batch``, SplitBN."""
    cfg = Config.fromfile(FOLDER)
    cfg.model.backbone.depth = 18
    cfg.model.neck.in_channels = cfg.model.neck.hid_channels = 512
    cfg.model.queue.size = 4096
    cfg.model.shuffle_bn, cfg.model.num_splits = 'split', 4
    pipeline = cfg.train_dataloader.dataset.pipeline
    for view in pipeline[1].transforms:
        view[0].scale = 64
    cfg.train_dataloader.dataset.data_root = data_root
    cfg.train_dataloader.batch_size = batch
    if path == 'device-aug':
        use_device_augmentation(cfg)
    elif path == 'device-decode':
        use_device_augmentation(cfg, decode_on_device=True)
    return cfg


def end_to_end(iters: int, warmup: int, folder: str, batch: int) -> List[dict]:
    runs = [('digits', p, lambda p=p: digits_cfg(p))
            for p in ('per-image', 'device-aug')]
    runs += [('resnet18-64px-folder', p,
              lambda p=p: resnet18_folder_cfg(p, folder, batch))
             for p in ('per-image', 'device-aug', 'device-decode')]
    rows = []
    for name, path, make in runs:
        for workers in (0, 1, 2):
            with tempfile.TemporaryDirectory() as work_dir:
                cfg = quiet(make(), work_dir, iters, workers)
                cfg.experiment_name = f'{name}-{path}-{workers}-{os.getpid()}'
                runner = RUNNERS.build(cfg)
                clock = Throughput(warmup)
                runner.register_hook(clock)
                runner.train()
            measured = iters - warmup
            images = measured * cfg.train_dataloader.batch_size
            rows.append(
                dict(
                    run=name,
                    path=path,
                    workers=workers,
                    batch=cfg.train_dataloader.batch_size,
                    images_per_s=round(images / (clock.end - clock.start), 1)))
            print(
                f'  {name} {path} workers={workers}: '
                f'{rows[-1]["images_per_s"]} images/s',
                flush=True)
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='benchmark.py device-augment', description=__doc__.split('\n')[0])
    parser.add_argument('--batches', type=int, nargs='+', default=[32, 256])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument(
        '--threads', type=int, default=1, help='torch CPU threads')
    parser.add_argument(
        '--decode', action='store_true', help='time decoding on the device')
    parser.add_argument(
        '--e2e', action='store_true', help='time short training runs')
    parser.add_argument('--iters', type=int, default=20)
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument(
        '--e2e-batch',
        type=int,
        default=32,
        help='batch of the ResNet-18 folder runs')
    parser.add_argument('--out', help='write the results as JSON here')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    devices = [torch.device('cpu')]
    if torch.cuda.is_available():
        devices.append(torch.device('cuda'))
    load_before = load_average()
    result = dict(
        cpu=cpu_name(),
        cuda=torch.cuda.get_device_name() if len(devices) > 1 else None,
        threads=args.threads,
        torch=torch.__version__,
        load_average_before=load_before)
    print(f'CPU threads {args.threads}; CUDA: {result["cuda"]}; load '
          f'average {load_before}')
    result['batched'] = batched_costs(args.batches, devices, args.rounds)
    print('\nBatched augmentation of the MoCo v2 recipe (2 views of 224 px '
          'per image), median ms:\n')
    rows = [
        dict(
            r,
            steps=', '.join(f'{k} {v}'
                            for k, v in r['ms_per_view_per_step'].items()))
        for r in result['batched']
    ]
    print(
        markdown_table(
            rows,
            dict(
                device='device',
                batch='batch',
                ms_per_image='ms per image',
                steps='ms per image per view, by step')))
    with tempfile.TemporaryDirectory() as folder:
        paths = make_images(folder, 64)
        if args.decode:
            result['decode'] = decode_costs(args.batches, devices, args.rounds,
                                            paths)
            print('\nDecoding, cropping and augmenting on the device '
                  '(_device-decode), median ms per image:\n')
            print(
                markdown_table(
                    result['decode'],
                    dict(
                        device='device',
                        batch='batch',
                        ms_per_image='ms per image')))
        if args.e2e:
            print('\nEnd to end (images/s after the first '
                  f'{args.warmup} of {args.iters} iterations):')
            result['end_to_end'] = end_to_end(args.iters, args.warmup, folder,
                                              args.e2e_batch)
            print()
            print(
                markdown_table(
                    result['end_to_end'],
                    dict(
                        run='run',
                        path='path',
                        workers='workers',
                        batch='batch',
                        images_per_s='images/s')))
    result['load_average_after'] = load_average()
    print(f'\nload average after: {result["load_average_after"]}')
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    write_json(result, args.out, indent=2)
    return result


if __name__ == '__main__':
    main()
