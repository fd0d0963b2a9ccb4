# Copyright (c) mocoplug contributors. All rights reserved.
"""Time a detector's training step and test pass on the mmcv kernels
mocoplug serves against compiled mmcv's (when installed), taking turns."""
import importlib
import math
import os.path as osp
import sys

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mocoplug.compat.mmcv_ops import ServedOps, serve_mmcv_ops
from .common import CONFIGS, machine, markdown_table, parser, round_robin_ms
from .detection_zoo import synthetic_batch


def build(config: str, size: int, batch: int, rois: int, device: str):
    """The config's detector (SyncBN as BN; ``rois`` RoIs per image) and
    :func:`synthetic_batch`'s images as floats in [0, 1] and samples."""
    from mmdet.registry import MODELS

    cfg = Config.fromstring(
        Config.fromfile(config).pretty_text.replace("'SyncBN'", "'BN'"), '.py')
    cfg.model.train_cfg.rcnn.sampler.num = rois
    cfg.model.test_cfg.rpn.max_per_img = rois
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model).to(device)
    data = synthetic_batch(size, batch, 20, device)
    for sample in data['data_samples']:
        sample.set_metainfo(dict(pad_shape=(size, size)))
        sample.set_metainfo(dict(batch_input_shape=(size, size)))
    return model, torch.stack(data['inputs']) / 255, data['data_samples']


def main(argv=None):
    p = parser(
        __doc__,
        'detection-ops',
        out=None,
        size=320,
        batch=2,
        rois=64,
        repeats=10)
    p.add_argument(
        '--config',
        default=osp.join(CONFIGS, 'detection',
                         'faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py'))
    args = p.parse_args(argv)
    kernels = {'served (torchvision)': ServedOps()}
    if not serve_mmcv_ops():
        kernels['compiled mmcv'] = importlib.import_module('mmcv._ext')
    model, inputs, samples = build(args.config, args.size, args.batch,
                                   args.rois, args.device)
    losses, boxes = [], []

    def use_kernels(ext) -> None:
        """Make mmcv's RoIAlign and nms call ``ext``'s kernels."""
        for name in ('mmcv.ops.roi_align', 'mmcv.ops.nms'):
            sys.modules[name].ext_module = ext

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

    rows = []
    for step, fn in (('train step', train_step), ('test pass', test_pass)):
        fns = {n: (lambda e=e: fn(e)) for n, e in kernels.items()}
        times = round_robin_ms(fns, args.device, args.repeats, warmup=2)
        for name, ms in times.items():
            ms = sorted(ms)
            rows.append(
                dict(
                    step=step,
                    kernels=name,
                    median=f'{ms[len(ms) // 2]:.1f}',
                    spread=f'{ms[0]:.1f}-{ms[-1]:.1f}'))
    use_kernels(list(kernels.values())[-1])  # compiled mmcv's when there
    print(f'{osp.basename(args.config)}, {args.batch} x {args.size}px '
          f'images, {args.rois} RoIs each, on {machine(args.device)}')
    if len(kernels) == 1:
        print('compiled mmcv not installed: served kernels only')
    columns = dict(
        step='step',
        kernels='mmcv kernels',
        median='median ms',
        spread='min-max ms')
    print(markdown_table(rows, columns))
    return dict(
        rows=rows,
        device=args.device,
        losses_finite=all(map(math.isfinite, losses)),
        boxes_per_pass=boxes[-1])
