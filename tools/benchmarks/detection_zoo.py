# Copyright (c) mocoplug contributors. All rights reserved.
"""mmdet's model zoo on this mmcv: per packaged config, one training step
and one test pass on random images, and what stopped it or the served
kernels it called."""
import os.path as osp
import time
import traceback
from collections import Counter
from typing import Dict, List, Optional

import mmdet
import torch
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope

from mocoplug.compat.mmcv_ops import (SERVED, MMCVOpNotServedError, ServedOps,
                                      serve_mmcv_ops)
from mocoplug.utils import walk_dicts
from .common import machine, markdown_table, parser, write_json

MMDET_CONFIGS = osp.join(osp.dirname(mmdet.__file__), '.mim', 'configs')
ZOO = [
    'faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py',
    'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    'cascade_rcnn/cascade-rcnn_r50_fpn_1x_coco.py',
    'htc/htc_r50_fpn_1x_coco.py',
    'point_rend/point-rend_r50-caffe_fpn_ms-1x_coco.py',
    'sparse_rcnn/sparse-rcnn_r50_fpn_1x_coco.py',
    'dcn/faster-rcnn_r50-dconv-c3-c5_fpn_1x_coco.py',
    'dcnv2/faster-rcnn_r50-mdconv-c3-c5_fpn_1x_coco.py',
    'retinanet/retinanet_r50_fpn_1x_coco.py',
    'fcos/fcos_r50-caffe_fpn_gn-head_1x_coco.py',
    'atss/atss_r50_fpn_1x_coco.py', 'gfl/gfl_r50_fpn_1x_coco.py',
    'tood/tood_r50_fpn_1x_coco.py', 'vfnet/vfnet_r50_fpn_1x_coco.py',
    'reppoints/reppoints-moment_r50_fpn-gn_head-gn_1x_coco.py',
    'centernet/centernet_r18_8xb16-crop512-140e_coco.py',
    'yolo/yolov3_d53_8xb8-320-273e_coco.py', 'yolox/yolox_s_8xb8-300e_coco.py',
    'rtmdet/rtmdet_tiny_8xb32-300e_coco.py',
    'solov2/solov2_r50_fpn_1x_coco.py', 'detr/detr_r50_8xb2-150e_coco.py',
    'deformable_detr/deformable-detr_r50_16xb2-50e_coco.py',
    'dino/dino-4scale_r50_8xb2-12e_coco.py',
    'mask2former/mask2former_r50_8xb2-lsj-50e_coco.py'
]
MIN_SIZE = {'dino/dino-4scale_r50_8xb2-12e_coco.py': 256}


def small_config(path: str) -> Config:
    """The packaged config with only the sizes changed."""
    cfg = Config.fromfile(path)

    def fix(node: dict) -> None:
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
        if isinstance(node.get('init_cfg'), dict) and \
                node['init_cfg'].get('type') == 'Pretrained':
            node['init_cfg'] = None

    walk_dicts(cfg.model, fix)
    cfg.model.get('data_preprocessor', {}).pop('batch_augments', None)
    return cfg


def loaded_annotations(cfg: Config) -> dict:
    """``with_mask`` and ``with_seg`` of the train pipeline's annotations."""
    found = dict(with_mask=False, with_seg=False)

    def read(node: dict) -> None:
        if node.get('type') == 'LoadAnnotations':
            found.update({k: node.get(k, False) for k in found})

    walk_dicts(cfg.get('train_dataloader', {}), read)
    return found


def synthetic_batch(size: int,
                    batch: int,
                    num_classes: int,
                    device: str,
                    with_mask: bool = False,
                    with_seg: bool = False) -> dict:
    """``batch`` random uint8 images with 3 boxes each (masks, an all-zero
    semantic map) and their DetDataSample, as mmdet's data loaders give."""
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData, PixelData

    gen = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for _ in range(batch):
        xy = torch.rand(3, 2, generator=gen) * size * 0.6
        wh = torch.rand(3, 2, generator=gen) * size * 0.3 + size * 0.1
        boxes = torch.cat([xy, xy + wh], 1)
        labels = torch.randint(0, num_classes, (3, ), generator=gen)
        masks = torch.zeros(3, size, size, dtype=torch.uint8)
        for mask, (x1, y1, x2, y2) in zip(masks, boxes.long().tolist()):
            mask[y1:y2, x1:x2] = 1
        sample = DetDataSample(
            metainfo=dict(
                img_shape=(size, size),
                ori_shape=(size, size),
                scale_factor=(1., 1.),
                border=(0, size, 0, size)))  # CenterNet's crop: none
        sample.gt_instances = InstanceData(bboxes=boxes, labels=labels)
        if with_mask:
            sample.gt_instances.masks = BitmapMasks(masks.numpy(), size, size)
        if with_seg:
            sample.gt_sem_seg = PixelData(
                sem_seg=torch.zeros(1, size, size, dtype=torch.long))
        samples.append(sample.to(device))
        inputs.append(
            torch.randint(
                0, 256, (3, size, size), generator=gen,
                dtype=torch.uint8).to(device))
    return dict(inputs=inputs, data_samples=samples)


def count_served_kernels() -> Counter:
    """Count the calls of every served kernel from now on."""
    calls: Counter = Counter()
    for name, kernel in SERVED.items():

        def call(*args, _name=name, _kernel=kernel, **kwargs):
            calls[_name] += 1
            return _kernel(*args, **kwargs)

        setattr(ServedOps, name, staticmethod(call))
    return calls


def run_row(config: str, size: int = 128, device: str = 'cpu') -> dict:
    """One training step and test pass of ``config`` (a path, or relative
    to mmdet's configs): ``config``, ``status`` ('ok', or the kernel or error
    that stopped it), ``stage``, ``kernels`` (served ones called), ``s``."""
    from mmdet.registry import MODELS
    from mmengine.logging import MessageHub
    path = config if osp.isfile(config) else osp.join(MMDET_CONFIGS, config)
    row = dict(config=osp.relpath(path, MMDET_CONFIGS), stage='build')
    size = max(size, MIN_SIZE.get(row['config'], 0))
    served = serve_mmcv_ops() is not None
    calls = count_served_kernels() if served else Counter()
    start = time.perf_counter()
    try:
        cfg = small_config(path)
        with DefaultScope.overwrite_default_scope('mmdet'):
            model = MODELS.build(cfg.model).to(device)
            model.init_weights()
            data = synthetic_batch(size, 2, 3, device,
                                   **loaded_annotations(cfg))
            row['stage'] = 'train'
            MessageHub.get_current_instance().update_info('epoch', 0)
            model.train()
            optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=1e-4))
            losses = model.train_step(data, optim)
            if not torch.isfinite(sum(losses.values())):
                raise FloatingPointError(f'non-finite losses {losses}')
            row['stage'] = 'test'
            model.eval()
            with torch.no_grad():
                out = model.test_step(data)
            assert len(out) == 2 and 'pred_instances' in out[0]
        row.update(status='ok', stage='')
    except MMCVOpNotServedError as error:
        row['status'] = f'kernel `{str(error).split("`")[1]}` not served'
    except Exception as error:  # noqa: BLE001 - the row reports it
        where = traceback.extract_tb(error.__traceback__)[-1]
        row['status'] = (f'{type(error).__name__}: {str(error)[:150]} '
                         f'({osp.basename(where.filename)}:{where.lineno})')
    finally:
        for name, kernel in SERVED.items():
            setattr(ServedOps, name, staticmethod(kernel))
    row['kernels'] = ', '.join(sorted(calls)) if served else 'compiled mmcv'
    row['s'] = round(time.perf_counter() - start, 1)
    return row


def main(argv: Optional[List[str]] = None) -> Dict:
    p = parser(__doc__, 'detection-zoo', size=128)
    p.add_argument('--configs', nargs='+', default=ZOO)
    args = p.parse_args(argv)
    mmcv = ('mmcv-lite, kernels served by mocoplug'
            if serve_mmcv_ops() else 'compiled mmcv')
    rows = []
    for config in args.configs:
        rows.append(run_row(config, args.size, args.device))
        print(f"{rows[-1]['config']}: {rows[-1]['status']}", flush=True)
    print(f'\n{len(rows)} configs of mmdet {mmdet.__version__}, {mmcv}, '
          f'2 images of {args.size} px, on {machine(args.device)}; '
          f"{sum(r['status'] == 'ok' for r in rows)} ok")
    columns = dict(
        config='config',
        status='train step + test pass',
        stage='stopped in',
        kernels='served kernels called',
        s='s')
    print(markdown_table(rows, columns))
    result = dict(device=args.device, mmcv=mmcv, size=args.size, rows=rows)
    write_json(result, args.out)
    return result
