# Copyright (c) mocoplug contributors. All rights reserved.
"""The detection demo (work in progress, issue 23.2): MoCo v2 pretraining
-> Faster R-CNN / Mask R-CNN C4 on embedded real data (scikit-learn's
handwritten digits composed into scenes).

1. Write scenes of 1-3 digits as PASCAL VOC and COCO (boxes, masks from the
   strokes): train scenes from the 1258 training digits, test scenes from
   the 539 held-out digits (mocoplug.datasets.detection_scenes).
2. Pretrain a slim ResNet-18 with MoCo v2 on the unlabelled train scenes
   (the digits config's recipe on the scenes as a folder).
3. Fine-tune the shipped C4 configs, scaled down for CPU
   (``scaled_detection_cfg``), from random init and from the MoCo
   checkpoint (``pretrained=``), per seed; evaluate on the test scenes.

    python tools/demo_detection.py [--work-dir work_dirs/demo_detection]
        [--seeds 0 1 2] [--iters 100] [--budgets 16 64] [--mask]

Not yet the demo the issue asks for: the supervised-init row, the figure
and the 10-minute budget are missing, and at the CPU-sized schedules
measured so far MoCo pretraining of the ResNet does not learn (loss at
ln(K + 1)); see the issue 23 report for the measured times.
"""
import argparse
import copy
import json
import os
import os.path as osp
import time
from typing import Dict, List, Optional

import numpy as np
from mmengine.config import Config
from mmengine.registry import RUNNERS, DefaultScope

import mocoplug  # noqa: F401
from mocoplug.datasets.detection_scenes import (digit_scenes, write_coco_split,
                                                write_voc_split)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
VOC_C4 = osp.join(ROOT, 'configs', 'detection',
                  'faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py')
COCO_C4 = osp.join(ROOT, 'configs', 'detection',
                   'mask-rcnn_r50-c4_syncbn-ms-1x_coco.py')
MOCO = osp.join(
    ROOT, 'configs',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
CLASSES = tuple(str(i) for i in range(10))
# The slim backbone of every run: ResNet-18 at a quarter of the width.
BACKBONE = dict(depth=18, base_channels=16)
SCENE = 64  # scene side (px); the detectors see it at 96 (test scale)
TEST_SCALE = 96


def write_scenes(root: str, budgets: List[int], num_unlabelled: int,
                 num_test: int) -> Dict[str, str]:
    """Write the scenes; return the data roots and the unlabelled folder."""
    voc, coco = osp.join(root, 'VOCdevkit'), osp.join(root, 'coco')
    unlabelled = digit_scenes('train', num_unlabelled, seed=0, size=SCENE)
    test = digit_scenes('test', num_test, seed=1, size=SCENE)
    folder = osp.join(root, 'unlabelled')
    os.makedirs(folder, exist_ok=True)
    from PIL import Image
    for i, (img, _) in enumerate(unlabelled):
        Image.fromarray(img).save(osp.join(folder, f'{i:05d}.jpg'), quality=95)
    # the labelled scenes are the first of the unlabelled ones
    for budget in budgets:
        write_voc_split(voc, '2007', f'train{budget}', unlabelled[:budget])
    write_voc_split(voc, '2007', 'test', test)
    write_coco_split(coco, 'train', unlabelled[:max(budgets)], CLASSES, 1)
    write_coco_split(coco, 'val', test, CLASSES, 100000)
    return dict(voc=voc + os.sep, coco=coco + os.sep, folder=folder)


def _walk(node, fn) -> None:
    if isinstance(node, dict):
        fn(node)
        for value in node.values():
            _walk(value, fn)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _walk(value, fn)


def scaled_detection_cfg(path: str,
                         data_root: str,
                         work_dir: str,
                         iters: int,
                         roi_size: int = 7,
                         rois: int = 32,
                         batch_size: int = 4,
                         train_ann: Optional[str] = None) -> Config:
    """A shipped C4 detection config scaled down for a CPU demo.

    Scaled: the backbone (``BACKBONE``, with res5 as
    ``ScalableResLayerExtraNorm``), the image scales (test 96 px instead of
    800, train shorter side 64-96 instead of 480/640-800), RoIAlign
    ``roi_size`` (14), ``rois`` sampled RoIs per image (512), the
    proposals (train 300/100, test 300/50 instead of 12000/2000 and
    6000/1000), the schedule (``iters`` iterations of ``batch_size``
    images, the lr steps at the same fractions, 1/10 of the iterations of
    warm-up), PreciseBN over 20 batches (200), BN instead of SyncBN (one
    process). Data: the digits' classes. Everything else as shipped.
    """
    cfg = Config.fromfile(path)
    coco = 'coco' in osp.basename(path)

    def fix(node: dict) -> None:
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
        if node.get('type') == 'RandomChoiceResize':
            node['scales'] = [(TEST_SCALE * 2, s)
                              for s in range(SCENE, TEST_SCALE + 1, 8)]
        if node.get('type') == 'Resize':
            node['scale'] = (TEST_SCALE * 2, TEST_SCALE)

    _walk(cfg.model, fix)
    m = cfg.model
    width = BACKBONE['base_channels']
    c4 = width * 4  # BasicBlock: expansion 1
    m.backbone.update(BACKBONE, stem_channels=width)
    m.roi_head.shared_head.update(type='ScalableResLayerExtraNorm', **BACKBONE)
    m.rpn_head.update(in_channels=c4, feat_channels=c4)
    m.roi_head.bbox_roi_extractor.update(
        out_channels=c4,
        roi_layer=dict(
            type='RoIAlign', output_size=roi_size, sampling_ratio=0))
    out = (roi_size + 1) // 2
    m.roi_head.bbox_head.update(
        in_channels=c4 * 2, roi_feat_size=out, num_classes=len(CLASSES))
    if 'mask_head' in m.roi_head:
        m.roi_head.mask_head.update(
            in_channels=c4 * 2, conv_out_channels=c4, num_classes=len(CLASSES))
        m.train_cfg.rcnn.mask_size = out * 2
    m.train_cfg.rcnn.sampler.num = rois
    m.train_cfg.rpn_proposal.update(nms_pre=300, max_per_img=100)
    m.test_cfg.rpn.update(nms_pre=300, max_per_img=50)

    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader',
                'val_evaluator', 'test_evaluator'):
        _walk(cfg[key], fix)
        if key.endswith('dataloader'):
            cfg[key].num_workers = 0
            cfg[key].persistent_workers = False
    metainfo = dict(classes=CLASSES)
    if coco:
        for key in ('train_dataloader', 'val_dataloader'):
            ds = cfg[key].dataset
            ds.update(data_root=data_root, metainfo=metainfo)
            ds.data_prefix = dict(
                img='train2017/' if key.startswith('train') else 'val2017/')
        cfg.val_evaluator.ann_file = osp.join(
            data_root, 'annotations/instances_val2017.json')
    else:
        cfg.train_dataloader.dataset = dict(
            cfg.train_dataloader.dataset.datasets[0],
            data_root=data_root,
            metainfo=metainfo,
            ann_file=train_ann)
        cfg.val_dataloader.dataset.update(
            data_root=data_root, metainfo=metainfo)
    cfg.train_dataloader.batch_size = batch_size
    cfg.train_dataloader.sampler = dict(type='InfiniteSampler', shuffle=True)
    cfg.test_dataloader = cfg.val_dataloader
    cfg.test_evaluator = cfg.val_evaluator
    cfg.train_cfg = dict(
        type='IterBasedTrainLoop', max_iters=iters, val_interval=iters)
    steps = [18 / 24, 22 / 24] if not coco else [8 / 12, 11 / 12]
    cfg.param_scheduler = [
        dict(
            type='LinearLR',
            start_factor=0.001,
            by_epoch=False,
            begin=0,
            end=max(1, iters // 10)),
        dict(
            type='MultiStepLR',
            begin=0,
            end=iters,
            by_epoch=False,
            milestones=[int(iters * s) for s in steps],
            gamma=0.1)
    ]
    for hook in cfg.custom_hooks:
        if hook.type == 'DetectionPreciseBNHook':
            hook.update(num_iters=20, interval=iters)
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook', interval=iters, by_epoch=False)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=50)
    cfg.log_processor = dict(by_epoch=False)
    cfg.work_dir = work_dir
    cfg.log_level = 'WARNING'
    return cfg


def pretrain_cfg(folder: str,
                 work_dir: str,
                 epochs: int,
                 size: int = 32,
                 lr: float = 0.03,
                 queue: int = 512) -> Config:
    """MoCo v2 on the unlabelled scenes: the digits config's recipe (BN
    projection neck, SplitBN, tau 0.2, views) with the slim ResNet-18, the
    scenes as a folder (mmpretrain's CustomDataset) resized to ``size``,
    ``lr`` and a ``queue`` about the number of scenes.

    Random resized crops of the scenes (scale 0.2-1, 64 px; K 4096, lr
    0.005 or K 512, lr 0.03) kept the loss at ln(K + 1) for 120
    iterations; whole scenes at 32 px (K 512, lr 0.03) brought it from 6.2
    to 5.3 in 96 (issue 23 report).
    """
    cfg = Config.fromfile(MOCO)
    cfg.model.backbone = dict(
        type='ResNet', stem_channels=BACKBONE['base_channels'], **BACKBONE)
    cfg.model.neck.in_channels = BACKBONE['base_channels'] * 8
    cfg.model.queue.size = queue
    cfg.optim_wrapper.optimizer.lr = lr
    view = [dict(type='Resize', scale=(size, size))] + list(cfg.view_pipeline)
    cfg.train_dataloader.dataset = dict(
        type='CustomDataset',
        data_root=folder,
        with_label=False,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='MultiView', num_views=2, transforms=[view]),
            dict(type='PackInputs')
        ])
    cfg.custom_hooks = [
        h for h in cfg.custom_hooks if h.type != 'KNNMonitorHook'
    ]
    cfg.param_scheduler = [
        dict(type='CosineAnnealingLR', T_max=epochs, by_epoch=True)
    ]
    cfg.train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=epochs)
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook', interval=epochs, max_keep_ckpts=1)
    cfg.work_dir = work_dir
    cfg.log_level = 'WARNING'
    return cfg


def run(cfg: Config, seed: int, pretrained: Optional[str]) -> Dict:
    """Train ``cfg`` with ``seed`` from ``pretrained`` (None: random
    init); return the test metrics."""
    cfg = copy.deepcopy(cfg)
    cfg.randomness = dict(seed=seed)
    cfg.pretrained = pretrained
    if pretrained is None:
        _walk(
            cfg.model, lambda n: n.get('init_cfg', {}).get('type') ==
            'Pretrained' and n.pop('init_cfg'))
    cfg.experiment_name = f'{osp.basename(cfg.work_dir)}-{time.time_ns()}'
    saved = dict(DefaultScope._instance_dict)
    try:
        runner = RUNNERS.build(cfg)
        runner.train()
        return runner.test()
    finally:
        DefaultScope._instance_dict.clear()
        DefaultScope._instance_dict.update(saved)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default='work_dirs/demo_detection')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--budgets', type=int, nargs='+', default=[16, 64])
    parser.add_argument('--iters', type=int, default=100)
    parser.add_argument('--pretrain-epochs', type=int, default=12)
    parser.add_argument('--unlabelled', type=int, default=512)
    parser.add_argument('--test', type=int, default=100)
    parser.add_argument('--pretrained', default=None)
    parser.add_argument('--mask', action='store_true')
    args = parser.parse_args(argv)
    wd = osp.abspath(args.work_dir)
    t0 = time.time()
    data = write_scenes(
        osp.join(wd, 'data'), args.budgets, args.unlabelled, args.test)
    print(f'scenes written ({time.time() - t0:.0f}s)', flush=True)
    ckpt = args.pretrained
    if ckpt is None:
        cfg = pretrain_cfg(data['folder'], osp.join(wd, 'moco'),
                           args.pretrain_epochs)
        runner = RUNNERS.build(cfg)
        runner.train()
        ckpt = osp.join(wd, 'moco', f'epoch_{args.pretrain_epochs}.pth')
        print(f'MoCo pretrained ({time.time() - t0:.0f}s)', flush=True)
    results = {}

    def record(key: str, value: float, seed: int) -> None:
        results.setdefault(key, []).append(value)
        print(
            f'{key} seed {seed}: {value:.3f} ({time.time() - t0:.0f}s)',
            flush=True)

    inits = (('random', None), ('moco', ckpt))
    for budget in args.budgets:
        cfg = scaled_detection_cfg(
            VOC_C4,
            data['voc'],
            osp.join(wd, f'voc{budget}'),
            args.iters,
            train_ann=f'VOC2007/ImageSets/Main/train{budget}.txt')
        for name, init in inits:
            for seed in args.seeds:
                metrics = run(cfg, seed, init)
                record(f'voc{budget}/{name}/AP50', metrics['pascal_voc/AP50'],
                       seed)
    if args.mask:
        cfg = scaled_detection_cfg(COCO_C4, data['coco'], osp.join(wd, 'coco'),
                                   args.iters)
        for name, init in inits:
            for seed in args.seeds:
                metrics = run(cfg, seed, init)
                for key in ('bbox_mAP', 'segm_mAP'):
                    record(f'coco{max(args.budgets)}/{name}/{key}',
                           metrics[f'coco/{key}'], seed)
    with open(osp.join(wd, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    for key, values in results.items():
        std = np.std(values, ddof=1) if len(values) > 1 else 0.
        print(f'{key}: {np.mean(values):.3f} ± {std:.3f} (n={len(values)})')


if __name__ == '__main__':
    main()
