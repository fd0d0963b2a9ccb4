# Copyright (c) mocoplug contributors. All rights reserved.
"""Images/s of one data-loader worker for MoCo's two-view augmentation.

Compares, in ONE process on ONE core (torch/OpenCV threads = 1, as in a
data-loader worker), on the same JPEG files:

- mocoplug: the train pipeline of a mocoplug config (default: the MoCo v2
  ImageNet config), built from the config;
- mmpretrain: mmpretrain's MoCo v2 pipeline (its base
  ``imagenet_bs32_mocov2.py``);
- official: the torchvision pipeline of facebookresearch/moco
  (``main_moco.py --aug-plus``): PIL loader, RandomResizedCrop(224,
  scale=(0.2, 1)), ColorJitter(0.4, 0.4, 0.4, 0.1) p=0.8, RandomGrayscale
  p=0.2, PIL GaussianBlur sigma in [0.1, 2] p=0.5, flip, ToTensor,
  Normalize, two views;
- device-aug: the worker's share of the device augmentation path
  (``--device-config``, the MoCo v2 ``_device-aug`` config): decode, crop,
  flip; the colour jitter, grayscale and blur run batched in the data
  preprocessor (their cost: ``benchmark.py device-augment``);
- device-decode: the worker's share when decoding on the device too
  (``--decode-config``): read the file and draw the crop boxes.

For each it times decoding (from bytes in memory), the two-view
augmentation (from the decoded image) and the whole pipeline from the file,
and it times the JPEG decoders mmcv's ``LoadImageFromFile`` can use
(``imdecode_backend``: cv2, pillow, and turbojpeg when PyTurboJPEG is
installed). Variants run alternately, round after round, each round on
every image with the same seeds; figures are medians over the rounds of
the process's CPU time per image (one worker on a core of its own; wall
time is in the JSON too).

Without ``--data-dir`` it writes JPEGs at ImageNet-like sizes (about
500 x 375, quality 90) cut from the two real photographs scikit-learn
ships (nothing is downloaded).

    python tools/benchmarks/benchmark.py pipeline [--num-images 32] \\
        [--rounds 7] [--config CONFIG] [--device-config CONFIG] \\
        [--decode-config CONFIG] [--data-dir DIR] [--out results.json]
"""
import argparse
import io
import os
import os.path as osp
import random
import statistics
import tempfile
import time
import warnings
from typing import Callable, Dict, List

import cv2
import mmcv
import mmpretrain
import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from mmengine.config import Config
from mmengine.dataset import Compose
from mmengine.registry import DefaultScope
from PIL import Image, ImageFilter

import mocoplug  # noqa: F401  (registers the transforms, patches mmcv)
from .common import CONFIGS, cpu_name, load_average, write_json

warnings.filterwarnings('ignore', message="Only use 'alpha'")

MMPRETRAIN_BASE = osp.join(
    osp.dirname(mmpretrain.__file__), '.mim', 'configs', '_base_', 'datasets',
    'imagenet_bs32_mocov2.py')
DEFAULT_CONFIG = osp.join(CONFIGS,
                          'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py')
DEVICE_CONFIG = osp.join(
    CONFIGS, 'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-aug.py')
DECODE_CONFIG = osp.join(
    CONFIGS, 'mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-decode.py')
# ImageNet's most common sizes (width x height)
SIZES = [(500, 375), (375, 500), (500, 333), (500, 400), (500, 500),
         (400, 500), (500, 332), (333, 500)]


def make_images(folder: str, num: int, seed: int = 0) -> List[str]:
    """Write ``num`` JPEGs cut from scikit-learn's sample photos."""
    from sklearn.datasets import load_sample_images
    photos = load_sample_images().images  # china.jpg, flower.jpg: 427x640
    rng = np.random.RandomState(seed)
    paths = []
    for i in range(num):
        photo = photos[i % len(photos)]
        h, w = photo.shape[:2]
        area = rng.uniform(0.35, 1.0) * h * w
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        ch = min(h, int(round(np.sqrt(area / ratio))))
        cw = min(w, int(round(np.sqrt(area * ratio))))
        y, x = rng.randint(0, h - ch + 1), rng.randint(0, w - cw + 1)
        img = Image.fromarray(photo[y:y + ch, x:x + cw])
        if rng.rand() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        img = img.resize(SIZES[i % len(SIZES)], Image.BICUBIC)
        paths.append(osp.join(folder, f'img_{i:03d}.JPEG'))
        img.save(paths[-1], quality=90)
    return paths


class OfficialBlur:
    """facebookresearch/moco's GaussianBlur: PIL blur, sigma ~ U(.1, 2)."""

    def __call__(self, img):
        return img.filter(ImageFilter.GaussianBlur(random.uniform(.1, 2.)))


def official_views() -> Callable:
    """The MoCo v2 (aug-plus) transform of the official code, two views."""
    augment = T.Compose([
        T.RandomResizedCrop(224, scale=(0.2, 1.)),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([OfficialBlur()], p=0.5),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    return lambda img: [augment(img), augment(img)]


def pil_loader(data: bytes) -> Image.Image:
    """torchvision's default loader (ImageFolder), from bytes."""
    return Image.open(io.BytesIO(data)).convert('RGB')


def decoders() -> Dict[str, Callable]:
    """mmcv's imdecode backends available here (BGR output)."""
    found = {
        'cv2': lambda b: mmcv.imfrombytes(b, backend='cv2'),
        'pillow': lambda b: mmcv.imfrombytes(b, backend='pillow'),
    }
    try:
        import turbojpeg  # noqa: F401
        found['turbojpeg'] = lambda b: mmcv.imfrombytes(b, backend='turbojpeg')
    except Exception:  # not installed, or its shared library is missing
        pass
    return found


def load_backend(pipeline: List[dict]) -> str:
    return pipeline[0].get('imdecode_backend', 'cv2')


def build(pipeline: List[dict]) -> Compose:
    with DefaultScope.overwrite_default_scope('mocoplug'):
        return Compose(pipeline)


def rounded_median_ms(times: List[float]) -> float:
    return round(statistics.median(times) * 1000, 3)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='benchmark.py pipeline', description=__doc__.split('\n')[0])
    parser.add_argument(
        '--config',
        default=DEFAULT_CONFIG,
        help='mocoplug config whose train pipeline to time')
    parser.add_argument(
        '--device-config',
        default=DEVICE_CONFIG,
        help='config of the device augmentation path')
    parser.add_argument(
        '--decode-config',
        default=DECODE_CONFIG,
        help='config decoding on the device')
    parser.add_argument(
        '--data-dir',
        help='folder of JPEGs to use instead '
        'of the generated ones')
    parser.add_argument('--num-images', type=int, default=32)
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--out', help='write the results as JSON here')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    cv2.setNumThreads(1)

    tmp = None
    if args.data_dir:
        paths = sorted(
            osp.join(args.data_dir, f) for f in os.listdir(args.data_dir)
            if f.lower().endswith(('.jpg', '.jpeg')))[:args.num_images]
        if not paths:
            raise SystemExit(f'--data-dir {args.data_dir}: no .jpg/.jpeg')
    else:
        tmp = tempfile.TemporaryDirectory()
        paths = make_images(tmp.name, args.num_images)
    blobs = [open(p, 'rb').read() for p in paths]

    ours_cfg = Config.fromfile(args.config).train_dataloader.dataset.pipeline
    ref_cfg = Config.fromfile(MMPRETRAIN_BASE).train_pipeline
    if ours_cfg[0]['type'] != 'LoadImageFromFile':
        raise SystemExit(f'{args.config}: the train pipeline should start '
                         'with LoadImageFromFile')
    device_cfg = Config.fromfile(
        args.device_config).train_dataloader.dataset.pipeline
    decode_cfg = Config.fromfile(
        args.decode_config).train_dataloader.dataset.pipeline
    pipelines = dict(
        mocoplug=(build(ours_cfg), build(ours_cfg[1:]),
                  load_backend(ours_cfg)),
        mmpretrain=(build(ref_cfg), build(ref_cfg[1:]), load_backend(ref_cfg)),
        **{
            'device-aug': (build(device_cfg), build(device_cfg[1:]),
                           load_backend(device_cfg))
        })
    read_bytes, draw_boxes = build(decode_cfg[:1]), build(decode_cfg[1:])
    headers = [read_bytes(dict(img_path=p)) for p in paths]
    decode = decoders()
    official = official_views()
    decoded_bgr = {name: [fn(b) for b in blobs] for name, fn in decode.items()}
    decoded_pil = [pil_loader(b) for b in blobs]

    # name -> function of the image index; all run on every image per round
    stages = {}
    for name, fn in decode.items():
        stages[f'decode/{name}'] = lambda i, fn=fn: fn(blobs[i])
    stages['decode/PIL'] = lambda i: np.asarray(pil_loader(blobs[i]))
    for name, (full, views, backend) in pipelines.items():
        stages[f'augment/{name}'] = lambda i, v=views, b=backend: v(
            dict(img=decoded_bgr[b][i].copy(), sample_idx=i))
        stages[f'full/{name}'] = lambda i, f=full: f(
            dict(img_path=paths[i], sample_idx=i))
    # decoding on the device: the worker reads the file and its header
    # ("decode" column) and draws the crop boxes ("augment")
    stages['decode/header'] = lambda i: read_bytes(dict(img_path=paths[i]))
    stages['augment/device-decode'] = lambda i: draw_boxes(
        dict(headers[i], sample_idx=i))
    stages['full/device-decode'] = lambda i: draw_boxes(
        read_bytes(dict(img_path=paths[i], sample_idx=i)))
    stages['augment/official'] = lambda i: official(decoded_pil[i])
    stages['full/official'] = lambda i: official(
        pil_loader(open(paths[i], 'rb').read()))

    load_before = load_average()
    cpu_times = {name: [] for name in stages}
    wall_times = {name: [] for name in stages}
    names = list(stages)
    for r in range(args.rounds + 1):  # round 0 warms up
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            random.seed(r)
            np.random.seed(r)
            torch.manual_seed(r)
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(len(paths)):
                stages[name](i)
            if r:
                n = len(paths)
                cpu_times[name].append((time.process_time() - cpu) / n)
                wall_times[name].append((time.perf_counter() - wall) / n)
    load_after = load_average()

    # CPU time of this (single-threaded) process: what one worker costs on
    # a core of its own, and much less disturbed than wall time when other
    # processes share the cores
    ms = {name: rounded_median_ms(t) for name, t in cpu_times.items()}
    wall_ms = {name: rounded_median_ms(t) for name, t in wall_times.items()}
    rows = []
    for name in ('official', 'mmpretrain', 'mocoplug', 'device-aug',
                 'device-decode'):
        backend = dict(
            official='PIL', **{
                'device-decode': 'header'
            }).get(name) or pipelines[name][2]
        full = ms[f'full/{name}']
        rows.append(
            dict(
                pipeline=name,
                decode_backend=backend,
                decode_ms=ms[f'decode/{backend}'],
                augment_ms=ms[f'augment/{name}'],
                full_ms=full,
                full_wall_ms=wall_ms[f'full/{name}'],
                images_per_s=round(1000 / full, 1)))
    official_ips = rows[0]['images_per_s']
    ours_ips = rows[2]['images_per_s']
    for row in rows:
        row['vs_official'] = round(row['images_per_s'] / official_ips, 2)
        row['vs_mocoplug'] = round(row['images_per_s'] / ours_ips, 2)

    sizes = sorted({Image.open(p).size for p in paths})
    print(f'{len(paths)} JPEGs ({len(sizes)} sizes, e.g. '
          f'{sizes[0][0]}x{sizes[0][1]}; '
          f'{np.mean([len(b) for b in blobs]) / 1024:.0f} KiB on average), '
          f'{args.rounds} rounds, 1 thread; load average '
          f'{load_before} -> {load_after}')
    print('\nJPEG decoding, CPU ms per image (median over rounds):\n')
    print('| decoder | ms/image |\n|---|---|')
    for name in list(decode) + ['PIL']:
        label = {
            'PIL': 'PIL open + convert RGB (torchvision loader)'
        }.get(name, f'mmcv imfrombytes, backend={name}')
        print(f'| {label} | {ms["decode/" + name]:.2f} |')
    if 'turbojpeg' not in decode:
        print('| mmcv, backend=turbojpeg | not installed (PyTurboJPEG) |')
    print('\nTwo views per image, one worker (CPU ms per image; '
          'images/s = 1000 / full):\n')
    print('| pipeline | decoder | decode | augment (2 views) | full, from '
          'file | images/s per worker | vs official | vs mocoplug | full, '
          'wall ms |')
    print('|---|---|---|---|---|---|---|---|---|')
    for row in rows:
        print(f'| {row["pipeline"]} | {row["decode_backend"]} | '
              f'{row["decode_ms"]:.2f} | {row["augment_ms"]:.2f} | '
              f'{row["full_ms"]:.2f} | {row["images_per_s"]:.1f} | '
              f'{row["vs_official"]:.2f} | {row["vs_mocoplug"]:.2f} | '
              f'{row["full_wall_ms"]:.2f} |')
    print('\nofficial includes ToTensor + Normalize (float CHW); mmpretrain '
          'and mocoplug output uint8 CHW and normalise on the GPU. '
          'device-aug leaves colour jitter, grayscale and blur to the data '
          'preprocessor; device-decode (decoder "header": read the file, '
          'parse its header) leaves decoding and cropping too (their cost '
          'on the device: benchmark.py device-augment).')

    result = dict(
        config=osp.relpath(args.config),
        device_config=osp.relpath(args.device_config),
        decode_config=osp.relpath(args.decode_config),
        num_images=len(paths),
        image_sizes=[list(s) for s in sizes],
        mean_jpeg_kib=round(np.mean([len(b) for b in blobs]) / 1024, 1),
        rounds=args.rounds,
        threads=1,
        load_average_before=load_before,
        load_average_after=load_after,
        cpu=cpu_name(),
        versions=dict(
            torch=torch.__version__,
            torchvision=torchvision.__version__,
            opencv=cv2.__version__,
            pillow=Image.__version__,
            numpy=np.__version__,
            mmcv=mmcv.__version__,
            mmpretrain=mmpretrain.__version__),
        median_cpu_ms=ms,
        median_wall_ms=wall_ms,
        rows=rows)
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    write_json(result, args.out, indent=2)
    if tmp is not None:
        tmp.cleanup()
    return result


if __name__ == '__main__':
    main()
