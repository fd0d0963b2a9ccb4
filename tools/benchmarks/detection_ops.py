# Copyright (c) mocoplug contributors. All rights reserved.
"""Time one detector training step and one test pass with the mmcv kernels
mocoplug serves (torchvision) against compiled mmcv's, same model and
batch, the two taking turns.

    python tools/benchmarks/benchmark.py detection-ops [--config VOC_C4] \\
        [--size 320] [--batch 2] [--rois 64] [--device cpu]

Without a compiled mmcv only the served kernels are timed (the comparison
needs ``make setup-full``, or its wheel first on PYTHONPATH).
"""
import argparse
import importlib
import math
import os.path as osp
import sys

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mocoplug.compat.mmcv_ops import ServedOps, serve_mmcv_ops
from .common import CONFIGS, machine, markdown_table, round_robin_ms

VOC_C4 = osp.join(CONFIGS, 'detection',
                  'faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py')
# the mmcv modules that call the kernels mocoplug serves
KERNEL_USERS = ('mmcv.ops.roi_align', 'mmcv.ops.nms')


def use_kernels(ext) -> None:
    """Make mmcv's RoIAlign and nms call ``ext``'s kernels."""
    for name in KERNEL_USERS:
        sys.modules[name].ext_module = ext


def build(config: str, size: int, batch: int, rois: int, device: str):
    """The config's detector (SyncBN as BN; ``rois`` RoIs per image in
    training and testing) and a batch of ``batch`` random ``size`` x
    ``size`` images with 3 boxes each."""
    from mmdet.registry import MODELS
    from mmdet.structures import DetDataSample
    from mmengine.structures import InstanceData

    cfg = Config.fromfile(config)
    text = cfg.pretty_text.replace("'SyncBN'", "'BN'")
    cfg = Config.fromstring(text, '.py')
    cfg.model.train_cfg.rcnn.sampler.num = rois
    cfg.model.test_cfg.rpn.max_per_img = rois
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model).to(device)
    gen = torch.Generator().manual_seed(0)
    samples = []
    for _ in range(batch):
        xy = torch.rand(3, 2, generator=gen) * size * 0.6
        wh = torch.rand(3, 2, generator=gen) * size * 0.3 + size * 0.1
        sample = DetDataSample(
            metainfo=dict(
                img_shape=(size, size),
                ori_shape=(size, size),
                scale_factor=(1., 1.),
                pad_shape=(size, size),
                batch_input_shape=(size, size)))
        sample.gt_instances = InstanceData(
            bboxes=torch.cat([xy, xy + wh], 1).to(device),
            labels=torch.randint(0, 20, (3, ), generator=gen).to(device))
        samples.append(sample)
    inputs = torch.rand(batch, 3, size, size, generator=gen).to(device)
    return model, inputs, samples


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='benchmark.py detection-ops', description=__doc__.split('\n')[0])
    parser.add_argument('--config', default=VOC_C4)
    parser.add_argument('--size', type=int, default=320)
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--rois', type=int, default=64)
    parser.add_argument(
        '--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--repeats', type=int, default=10)
    args = parser.parse_args(argv)

    compiled = None if serve_mmcv_ops() else importlib.import_module(
        'mmcv._ext')
    served = ServedOps()
    model, inputs, samples = build(args.config, args.size, args.batch,
                                   args.rois, args.device)

    losses, boxes = [], []

    def train_step(ext):
        use_kernels(ext)
        model.train()
        loss, _ = model.parse_losses(model(inputs, samples, mode='loss'))
        loss.backward()
        model.zero_grad(set_to_none=True)
        losses.append(loss.item())

    def test_pass(ext):
        use_kernels(ext)
        model.eval()
        with torch.no_grad():
            out = model(inputs, samples, mode='predict')
        boxes.append(sum(len(o.pred_instances) for o in out))

    kernels = {'served (torchvision)': served}
    if compiled is not None:
        kernels['compiled mmcv'] = compiled
    rows = []
    for step, fn in (('train step', train_step), ('test pass', test_pass)):
        times = round_robin_ms(
            {
                name: (lambda ext=ext: fn(ext))
                for name, ext in kernels.items()
            },
            args.device,
            repeats=args.repeats,
            warmup=2)
        for name, ms in times.items():
            ms = sorted(ms)
            rows.append(
                dict(
                    step=step,
                    kernels=name,
                    median=f'{ms[len(ms) // 2]:.1f}',
                    spread=f'{ms[0]:.1f}-{ms[-1]:.1f}'))
    use_kernels(compiled or served)
    print(f'{osp.basename(args.config)}, {args.batch} x {args.size}px '
          f'images, {args.rois} RoIs each, on {machine(args.device)}')
    if compiled is None:
        print('compiled mmcv not installed: served kernels only')
    print(
        markdown_table(
            rows,
            dict(
                step='step',
                kernels='mmcv kernels',
                median='median ms',
                spread='min-max ms')))
    return dict(
        rows=rows,
        device=args.device,
        losses_finite=all(map(math.isfinite, losses)),
        boxes_per_pass=boxes[-1])
