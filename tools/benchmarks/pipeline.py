# Copyright (c) mocoplug contributors. All rights reserved.
"""Images/s of one data-loader worker for MoCo's two-view augmentation:
mocoplug's, mmpretrain's, the official and the device paths' pipelines on the
same JPEGs, one thread; medians of CPU time per image."""
import io
import os
import os.path as osp
import random
import statistics
import tempfile
import time
import warnings
from contextlib import suppress
from functools import partial
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
from mmengine.runner import set_random_seed
from PIL import Image, ImageFilter

import mocoplug  # noqa: F401  (registers the transforms, patches mmcv)
from .common import CONFIGS, cpu_name, load_average, parser, write_json

warnings.filterwarnings('ignore', message="Only use 'alpha'")

MMPRETRAIN_BASE = osp.join(
    osp.dirname(mmpretrain.__file__), '.mim', 'configs', '_base_', 'datasets',
    'imagenet_bs32_mocov2.py')
V2 = osp.join(CONFIGS, 'mocov2/mocov2_r50_8xb32-coslr-200e_in1k')
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


def official_views() -> Callable:
    """The MoCo v2 (aug-plus) transform of the official code, two views."""

    def blur(img):  # PIL blur, sigma ~ U(.1, 2), as theirs
        return img.filter(ImageFilter.GaussianBlur(random.uniform(.1, 2.)))

    augment = T.Compose([
        T.RandomResizedCrop(224, scale=(0.2, 1.)),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([blur], p=0.5),
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
    found = ['cv2', 'pillow']
    with suppress(Exception):  # not installed, or its library is missing
        import turbojpeg  # noqa: F401
        found.append('turbojpeg')
    return {name: partial(mmcv.imfrombytes, backend=name) for name in found}


def train_pipeline(config: str) -> List[dict]:
    return Config.fromfile(config).train_dataloader.dataset.pipeline


def build(pipeline: List[dict]) -> Compose:
    with DefaultScope.overwrite_default_scope('mocoplug'):
        return Compose(pipeline)


def main(argv=None):
    p = parser(__doc__, 'pipeline', device=False, num_images=32, rounds=7)
    p.add_argument('--config', default=V2 + '.py')  # its train pipeline
    p.add_argument('--data-dir', help='JPEGs to use instead of generated ones')
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    tmp = tempfile.TemporaryDirectory()
    if args.data_dir:
        paths = sorted(
            osp.join(args.data_dir, f) for f in os.listdir(args.data_dir)
            if f.lower().endswith(('.jpg', '.jpeg')))[:args.num_images]
        if not paths:
            raise SystemExit(f'--data-dir {args.data_dir}: no .jpg/.jpeg')
    else:
        paths = make_images(tmp.name, args.num_images)
    blobs = [open(p, 'rb').read() for p in paths]
    ours_cfg = train_pipeline(args.config)
    if ours_cfg[0]['type'] != 'LoadImageFromFile':
        raise SystemExit(f'{args.config}: the train pipeline should start '
                         'with LoadImageFromFile')
    backends = dict(official='PIL', **{'device-decode': 'header'})
    pipelines = {}  # name: (from the file, from the decoded image)
    for name, cfg in (('mocoplug', ours_cfg),
                      ('mmpretrain',
                       Config.fromfile(MMPRETRAIN_BASE).train_pipeline),
                      ('device-aug', train_pipeline(V2 + '_device-aug.py'))):
        pipelines[name] = build(cfg), build(cfg[1:])
        backends[name] = cfg[0].get('imdecode_backend', 'cv2')
    decode_cfg = train_pipeline(V2 + '_device-decode.py')
    read_bytes, draw_boxes = build(decode_cfg[:1]), build(decode_cfg[1:])
    headers = [read_bytes(dict(img_path=p)) for p in paths]
    decode = decoders()
    official = official_views()
    decoded_bgr = {name: [fn(b) for b in blobs] for name, fn in decode.items()}
    decoded_pil = [pil_loader(b) for b in blobs]
    stages = dict((f'decode/{name}', lambda i, fn=fn: fn(blobs[i]))
                  for name, fn in decode.items())
    stages['decode/PIL'] = lambda i: np.asarray(pil_loader(blobs[i]))
    for name, (full, views) in pipelines.items():
        stages[f'augment/{name}'] = lambda i, v=views, b=backends[name]: v(
            dict(img=decoded_bgr[b][i].copy(), sample_idx=i))
        stages[f'full/{name}'] = lambda i, f=full: f(
            dict(img_path=paths[i], sample_idx=i))
    stages['decode/header'] = lambda i: read_bytes(dict(img_path=paths[i]))
    stages['augment/device-decode'] = lambda i: draw_boxes(
        dict(headers[i], sample_idx=i))
    stages['full/device-decode'] = lambda i: draw_boxes(
        read_bytes(dict(img_path=paths[i], sample_idx=i)))
    stages['augment/official'] = lambda i: official(decoded_pil[i])
    stages['full/official'] = lambda i: official(
        pil_loader(open(paths[i], 'rb').read()))
    load_before = load_average()
    cpu_times, wall_times = ({name: [] for name in stages} for _ in range(2))
    names, n = list(stages), len(paths)
    for r in range(args.rounds + 1):  # round 0 warms up
        for name in names[r % len(names):] + names[:r % len(names)]:
            set_random_seed(r)
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(n):
                stages[name](i)
            if r:
                cpu_times[name].append((time.process_time() - cpu) / n)
                wall_times[name].append((time.perf_counter() - wall) / n)
    load_after = load_average()
    ms, wall_ms = ({
        name: round(statistics.median(t) * 1000, 3)
        for name, t in times.items()
    } for times in (cpu_times, wall_times))
    rows = []
    for name in ('official', 'mmpretrain', 'mocoplug', 'device-aug',
                 'device-decode'):
        full = ms[f'full/{name}']
        rows.append(
            dict(
                pipeline=name,
                decode_backend=backends[name],
                decode_ms=ms[f'decode/{backends[name]}'],
                augment_ms=ms[f'augment/{name}'],
                full_ms=full,
                full_wall_ms=wall_ms[f'full/{name}'],
                images_per_s=round(1000 / full, 1)))
    for row in rows:
        for key, base in (('vs_official', rows[0]), ('vs_mocoplug', rows[2])):
            row[key] = round(row['images_per_s'] / base['images_per_s'], 2)
    sizes = sorted({Image.open(p).size for p in paths})
    kib = round(np.mean([len(b) for b in blobs]) / 1024, 1)
    print(f'{len(paths)} JPEGs ({len(sizes)} sizes, e.g. '
          f'{sizes[0][0]}x{sizes[0][1]}; {kib:.0f} KiB on average), '
          f'{args.rounds} rounds, 1 thread; load average '
          f'{load_before} -> {load_after}')
    print('\nJPEG decoding, CPU ms per image (median over rounds):\n')
    print('| decoder | ms/image |\n|---|---|')
    for name in list(decode) + ['PIL']:
        label = 'PIL open + convert RGB (torchvision loader)' if \
            name == 'PIL' else f'mmcv imfrombytes, backend={name}'
        print(f'| {label} | {ms["decode/" + name]:.2f} |')
    if 'turbojpeg' not in decode:
        print('| mmcv, backend=turbojpeg | not installed (PyTurboJPEG) |')
    print('\nTwo views per image, one worker (CPU ms per image; '
          'images/s = 1000 / full):\n')
    print('| pipeline | decoder | decode | augment (2 views) | full, from '
          'file | images/s per worker | vs official | vs mocoplug | full, '
          'wall ms |\n|---|---|---|---|---|---|---|---|---|')
    line = ('| {pipeline} | {decode_backend} | {decode_ms:.2f} | '
            '{augment_ms:.2f} | {full_ms:.2f} | {images_per_s:.1f} | '
            '{vs_official:.2f} | {vs_mocoplug:.2f} | {full_wall_ms:.2f} |')
    for row in rows:
        print(line.format(**row))
    print('\nofficial includes ToTensor + Normalize (float CHW); mmpretrain '
          'and mocoplug output uint8 CHW and normalise on the GPU. '
          'device-aug leaves colour jitter, grayscale and blur to the data '
          'preprocessor; device-decode (decoder "header": read the file, '
          'parse its header) leaves decoding and cropping too (their cost '
          'on the device: benchmark.py device-augment).')
    result = dict(
        config=osp.relpath(args.config),
        num_images=len(paths),
        image_sizes=[list(s) for s in sizes],
        mean_jpeg_kib=kib,
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
    write_json(result, args.out)
    tmp.cleanup()
    return result
