# Copyright (c) mocoplug contributors. All rights reserved.
"""The detection demo: MoCo v2, supervised and random-init backbones
fine-tuned as Faster and Mask R-CNN C4 on a few labelled digit scenes; prints
the table, writes results.json/png (configs/detection/README.md)."""
import argparse
import contextlib
import copy
import json
import multiprocessing
import os
import os.path as osp
import time
import warnings
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DET = osp.join(ROOT, 'configs', 'detection')
VOC_C4 = osp.join(DET, 'faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py')
COCO_C4 = osp.join(DET, 'mask-rcnn_r50-c4_syncbn-ms-1x_coco.py')
MOCO = osp.join(ROOT, 'configs', 'mocov2',
                'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
CLASSES = tuple(str(i) for i in range(10))
# ResNet-18 at a quarter of the width; the detectors' res5 head is layer4
BACKBONE = dict(depth=18, base_channels=16)
# the pretrained backbones, initialised as the shipped MoCo v2 configs
RESNET = dict(
    BACKBONE,
    type='ResNet',
    stem_channels=BACKBONE['base_channels'],
    zero_init_residual=False)
SCENE = 64  # scene side (px); the detectors see it at 96 (test scale)
TEST_SCALE = 96
FIGURE_SCENES = 4
TEXT = dict(fontsize=7, color='yellow', va='bottom')  # a detection's label


def write_scenes(root: str, budgets: List[int], num_unlabelled: int,
                 num_held: int) -> Dict[str, str]:
    """Write the scenes; return the data roots and the unlabelled folder."""
    from PIL import Image

    from mocoplug.datasets import detection_scenes as ds
    voc, coco = osp.join(root, 'VOCdevkit'), osp.join(root, 'coco')
    unlabelled = ds.digit_scenes('train', num_unlabelled, seed=0, size=SCENE)
    folder = osp.join(root, 'unlabelled')
    os.makedirs(folder, exist_ok=True)
    for i, (img, _) in enumerate(unlabelled):
        Image.fromarray(img).save(osp.join(folder, f'{i:05d}.png'))
    for budget in budgets:  # labelled: the first of the unlabelled scenes
        ds.write_voc_split(voc, '2007', f'train{budget}', unlabelled[:budget])
    for split, digits, seed in (('val', 'train', 1), ('test', 'test', 2)):
        scenes = ds.digit_scenes(digits, num_held, seed=seed, size=SCENE)
        ds.write_voc_split(voc, '2007', split, scenes)
        ds.write_coco_split(coco, split, scenes, CLASSES, 100000)
    ds.write_coco_split(coco, 'train', unlabelled[:max(budgets)], CLASSES, 1)
    return dict(voc=voc + os.sep, coco=coco + os.sep, folder=folder)


def single_process_cfg(cfg,
                       choice_scales: Optional[Callable] = None,
                       scale: Optional[Callable] = None,
                       keys: Sequence[str] = ()):
    """``cfg`` changed in place: BN for SyncBN; in ``cfg[key]`` for each of
    ``keys``, ``RandomChoiceResize``/``Resize`` scales mapped."""
    from mocoplug.utils import walk_dicts

    def fix(node: dict) -> None:
        if node.get('type') == 'RandomChoiceResize':
            node['scales'] = choice_scales(node['scales'])
        if node.get('type') == 'Resize':
            node['scale'] = scale(node['scale'])

    walk_dicts(cfg.model,
               lambda n: n.get('type') == 'SyncBN' and n.update(type='BN'))
    for key in keys:
        walk_dicts(cfg[key], fix)
    return cfg


def scaled_detection_cfg(path: str,
                         data_root: str,
                         work_dir: str,
                         iters: int,
                         budget: int,
                         split: str = 'test'):
    """A shipped C4 config scaled down for a CPU (configs/detection/README.md),
    trained on the first ``budget`` labelled scenes, tested on ``split``."""
    from mmengine.config import Config
    scales = [(TEST_SCALE * 2, s) for s in range(SCENE, TEST_SCALE + 1, 8)]
    cfg = single_process_cfg(
        Config.fromfile(path), lambda _: list(scales), lambda _:
        (TEST_SCALE * 2, TEST_SCALE),
        ('train_dataloader', 'val_dataloader', 'val_evaluator'))
    coco = 'coco' in osp.basename(path)
    m = cfg.model
    c4 = BACKBONE['base_channels'] * 4  # BasicBlock: expansion 1
    m.backbone.update(BACKBONE, stem_channels=BACKBONE['base_channels'])
    m.roi_head.shared_head.update(type='ScalableResLayerExtraNorm', **BACKBONE)
    m.rpn_head.update(in_channels=c4, feat_channels=c4)
    m.roi_head.bbox_roi_extractor.update(
        out_channels=c4,
        roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=0))
    m.roi_head.bbox_head.update(
        in_channels=c4 * 2, roi_feat_size=4, num_classes=len(CLASSES))
    m.train_cfg.rcnn.sampler.num = 16
    m.train_cfg.rpn_proposal.update(nms_pre=300, max_per_img=100)
    m.test_cfg.rpn.update(nms_pre=300, max_per_img=50)
    train, test = cfg.train_dataloader, cfg.val_dataloader
    if coco:  # Mask R-CNN
        m.roi_head.mask_head.update(
            in_channels=c4 * 2, conv_out_channels=c4, num_classes=len(CLASSES))
        m.train_cfg.rcnn.mask_size = 8
        ann_file = f'annotations/instances_{split}2017.json'
        train.dataset.update(
            data_prefix=dict(img='train2017/'), indices=budget)
        test.dataset.update(
            ann_file=ann_file, data_prefix=dict(img=f'{split}2017/'))
        cfg.val_evaluator.ann_file = osp.join(data_root, ann_file)
    else:
        lists = 'VOC2007/ImageSets/Main/'
        train.dataset = dict(
            train.dataset.datasets[0], ann_file=f'{lists}train{budget}.txt')
        test.dataset.update(ann_file=f'{lists}{split}.txt')
        cfg.val_evaluator.iou_thrs = [0.5]  # AP50 (AP50:95: 5 s more a run)
    for loader in (train, test):
        loader.update(num_workers=0, persistent_workers=False)
        loader.dataset.update(
            data_root=data_root, metainfo=dict(classes=CLASSES))
    train.batch_size = 4
    cfg.test_dataloader, cfg.test_evaluator = test, cfg.val_evaluator
    cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters)
    steps = (8 / 12, 11 / 12) if coco else (18 / 24, 22 / 24)
    milestones = [int(iters * s) for s in steps]
    cfg.optim_wrapper.optimizer.lr = 0.02
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=0.001, end=max(1, iters // 10)),
        dict(type='MultiStepLR', end=iters, milestones=milestones, gamma=0.1)
    ]
    for scheduler in cfg.param_scheduler:
        scheduler.update(by_epoch=False, begin=0)
    for hook in cfg.custom_hooks:
        if hook.type == 'DetectionPreciseBNHook':
            hook.update(num_iters=min(20, iters), interval=iters)
    cfg.default_hooks.checkpoint = None  # the demo keeps no detector
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=50)
    cfg.log_processor = dict(by_epoch=False)
    cfg.work_dir, cfg.log_level = work_dir, 'INFO'  # to the run's log file
    return cfg


def moco_cfg(folder: str, work_dir: str, epochs: int):
    """The digits MoCo v2 recipe on the unlabelled scenes: ``RESNET``, K 512
    (about the number of scenes), lr 0.03."""
    from benchmarks.common import quiet_cfg
    cfg = quiet_cfg(MOCO, work_dir)  # without the kNN monitor
    cfg.model.backbone, cfg.model.queue.size = RESNET, 512
    cfg.model.neck.in_channels = BACKBONE['base_channels'] * 8
    cfg.optim_wrapper.optimizer.lr = 0.03
    view = [dict(type='Resize', scale=(SCENE, SCENE))] + cfg.view_pipeline
    cfg.train_dataloader.dataset = dict(
        type='CustomDataset',  # the scenes as a folder
        data_root=folder,
        with_label=False,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='MultiView', num_views=2, transforms=[view]),
            dict(type='PackInputs')
        ])
    cfg.param_scheduler[0].update(T_max=epochs, end=epochs)
    cfg.train_cfg.max_epochs = cfg.default_hooks.checkpoint.interval = epochs
    return cfg


def supervised_cfg(work_dir: str, epochs: int):
    """The backbone trained on the labelled training digits (40 px, their
    size in the scenes), MoCo's views: the paper's 'supervised' row."""
    from mmengine.config import Config
    moco = Config.fromfile(MOCO)
    return Config(
        dict(
            default_scope='mmpretrain',
            model=dict(
                type='ImageClassifier',
                data_preprocessor=dict(
                    moco.data_preprocessor,
                    type='ClsDataPreprocessor',
                    num_classes=10),
                backbone=RESNET,
                neck=dict(type='GlobalAveragePooling'),
                head=dict(
                    type='LinearClsHead',
                    num_classes=10,
                    in_channels=BACKBONE['base_channels'] * 8)),
            train_dataloader=dict(
                batch_size=64,
                num_workers=0,
                sampler=dict(type='DefaultSampler', shuffle=True),
                collate_fn=dict(type='default_collate'),
                dataset=dict(
                    type='mocoplug.DigitsDataset',
                    img_size=40,
                    split='train',
                    pipeline=moco.view_pipeline + [dict(type='PackInputs')])),
            optim_wrapper=dict(
                optimizer=dict(
                    type='SGD', lr=0.1, momentum=0.9, weight_decay=1e-4)),
            param_scheduler=[
                dict(type='CosineAnnealingLR', T_max=epochs, by_epoch=True)
            ],
            train_cfg=dict(by_epoch=True, max_epochs=epochs),
            default_hooks=dict(
                checkpoint=dict(type='CheckpointHook', interval=epochs)),
            randomness=dict(seed=0),
            work_dir=work_dir,
            log_level='WARNING'))


def _worker_init() -> None:
    """One thread; the configs' ``custom_imports`` (not rerun in a worker)."""
    import torch
    torch.set_num_threads(1)
    with warnings.catch_warnings():  # the stack's import-time warnings
        warnings.simplefilter('ignore')
        import mocoplug.detection  # noqa: F401


def pretrain(make_cfg: Callable, *args) -> Tuple[str, float]:
    """Train ``make_cfg(*args)`` (``moco_cfg`` or ``supervised_cfg``); the
    last checkpoint, the seconds."""
    from mmengine.registry import RUNNERS
    started = time.time()
    cfg = make_cfg(*args)
    os.makedirs(cfg.work_dir, exist_ok=True)
    with open(osp.join(cfg.work_dir, 'run.log'), 'w') as log, \
            contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        RUNNERS.build(cfg).train()
    epochs = cfg.train_cfg.max_epochs
    return osp.join(cfg.work_dir, f'epoch_{epochs}.pth'), time.time() - started


def finetune(cfg, name: str, seed: int, pretrained: Optional[str],
             figure_images: List[str]) -> Tuple[Dict, list, float]:
    """Train ``cfg`` from ``pretrained`` (None: random init) in
    ``{work_dir}/{name}-{seed}``; the test metrics, the 3 best detections
    on each of ``figure_images``, the seconds."""
    from mmdet.apis import inference_detector
    from mmengine.registry import RUNNERS

    from mocoplug.utils import walk_dicts
    started = time.time()
    cfg = copy.deepcopy(cfg)
    cfg.randomness, cfg.pretrained = dict(seed=seed), pretrained
    if pretrained is None:
        walk_dicts(
            cfg.model, lambda n: n.get('init_cfg', {}).get('type') ==
            'Pretrained' and n.pop('init_cfg'))
    cfg.work_dir = osp.join(cfg.work_dir, f'{name}-{seed}')
    os.makedirs(cfg.work_dir, exist_ok=True)
    with open(osp.join(cfg.work_dir, 'run.log'), 'w') as log, \
            contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        runner = RUNNERS.build(cfg)
        runner.train()
        metrics = runner.test()
        runner.model.cfg = cfg
        results = inference_detector(runner.model, figure_images)
    preds = [r.pred_instances for r in results]
    best = [p[p.scores.argsort(descending=True)[:3]] for p in preds]
    detections = [[(box.tolist(), int(label), float(score))
                   for box, label, score in zip(p.bboxes, p.labels, p.scores)]
                  for p in best]
    return metrics, detections, time.time() - started


# (name, config, metrics shown, data format)
TASKS = (('Faster R-CNN C4 (VOC)', VOC_C4, ('pascal_voc/AP50', ), 'voc'),
         ('Mask R-CNN C4 (COCO)', COCO_C4, ('coco/bbox_mAP', 'coco/segm_mAP'),
          'coco'))
INITS = ('random init', 'MoCo v2', 'supervised')
INIT_DIRS = dict(zip(INITS, ('random', 'moco', 'supervised')))


def _order(item: tuple) -> tuple:
    """Sort key of a result (task, budget, metric as in TASKS)."""
    task, budget, metric = item[0].split(', ')
    return [t[0] for t in TASKS].index(task), int(budget.split()[0]), metric


def _mean_std(values: List[float]) -> Tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), x 100."""
    values = np.array(values) * 100
    return values.mean(), values.std(ddof=1) if len(values) > 1 else 0.


def summary_table(results: Dict[str, Dict[str, List[float]]],
                  seeds: List[int]) -> str:
    """One line per (metric, budget), one column per init."""
    lines = [f'{"":<44}' + ''.join(f'{init:>17}' for init in INITS)]
    for key, per_init in results.items():
        cells = [
            '%8.1f ± %4.1f' %
            _mean_std(per_init[init]) if per_init.get(init) else '-'
            for init in INITS
        ]
        lines.append(f'{key:<44}' + ''.join(f'{c:>17}' for c in cells))
    lines.append(f'(mean ± standard deviation over seeds {seeds}, x 100)')
    return '\n'.join(lines)


def figure(results: Dict[str, Dict[str, List[float]]], images: List[str],
           detections: Dict[str, list], path: str) -> str:
    """Bars of every metric, the detections of random init and MoCo."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from PIL import Image

    from mocoplug.visualization.results_figure import draw_bar_table
    cols = max(len(images), 2)
    fig = plt.figure(figsize=(3 * cols, 9.5))
    grid = fig.add_gridspec(3, cols, height_ratios=(1.6, 1, 1))
    table = {init: {} for init in INITS}
    for key, per_init in results.items():
        task, budget, metric = key.split(', ')
        for init, values in per_init.items():
            table[init][f'{task.split(" (")[0]}\n{budget}\n{metric}'] = \
                _mean_std(values)
    ax = fig.add_subplot(grid[0, :])
    draw_bar_table(ax, table,
                   'fine-tuned on a few labelled scenes, held-out digits',
                   'AP x 100')
    ax.set_ylim(
        0, 1.4 * max(m + e for row in table.values() for m, e in row.values()))
    for row, init in enumerate(('random init', 'MoCo v2'), start=1):
        for col, image in enumerate(images):
            ax = fig.add_subplot(grid[row, col])
            ax.imshow(Image.open(image))
            color = 'lime' if row == 2 else 'orange'
            for (x1, y1, x2, y2), label, score in detections[init][col]:
                box = (x1, y1), x2 - x1, y2 - y1
                ax.add_patch(plt.Rectangle(*box, fill=False, color=color))
                ax.text(x1, y1, f'{CLASSES[label]} {score:.1f}', **TEXT)
            ax.set(xticks=[], yticks=[], ylabel=init if col == 0 else '')
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default='work_dirs/demo_detection')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--budgets', type=int, nargs='+', default=[32, 128])
    parser.add_argument('--iters', type=int, default=200)
    parser.add_argument('--pretrain-epochs', type=int, default=12)
    parser.add_argument('--supervised-epochs', type=int, default=5)
    parser.add_argument('--unlabelled', type=int, default=512)
    parser.add_argument('--scenes', type=int, default=100, help='val, test')
    parser.add_argument('--val', action='store_true', help='test on val')
    parser.add_argument('--workers', type=int, default=2)
    args = parser.parse_args(argv)
    if max(args.budgets) > args.unlabelled:
        parser.error(f'--budgets: the labelled scenes are the first of the '
                     f'--unlabelled {args.unlabelled}; a budget of '
                     f'{max(args.budgets)} needs --unlabelled >= that')
    wd = osp.abspath(args.work_dir)
    started = time.time()
    budgets = sorted(args.budgets)
    split = 'val' if args.val else 'test'
    pool = ProcessPoolExecutor(
        args.workers,
        mp_context=multiprocessing.get_context('spawn'),
        initializer=_worker_init)
    # needs no scenes: trains while they are written
    supervised = pool.submit(pretrain, supervised_cfg,
                             osp.join(wd, 'supervised'),
                             args.supervised_epochs)
    data = write_scenes(
        osp.join(wd, 'data'), budgets, args.unlabelled, args.scenes)
    prefix = osp.join(data['voc'], 'VOC2007', 'JPEGImages', f'2007_{split}_')
    images = [f'{prefix}{i:04d}.jpg' for i in range(FIGURE_SCENES)]
    print(f'scenes written ({time.time() - started:.0f} s)', flush=True)
    detections, seconds = {}, {}
    runs = []  # the longest (Mask R-CNN) first, so that no worker idles
    for task, config, keys, fmt in reversed(TASKS):
        # Mask R-CNN at the larger budget only, (c) at the smaller only
        for budget in budgets if fmt == 'voc' else budgets[-1:]:
            cfg = scaled_detection_cfg(config, data[fmt],
                                       osp.join(wd, f'{fmt}{budget}'),
                                       args.iters, budget, split)
            runs += [
                (task, budget, keys, init, seed, cfg) for init in INITS
                if init != 'supervised' or (fmt, budget) == ('voc', budgets[0])
                for seed in args.seeds
            ]
    per_seed = defaultdict(lambda: defaultdict(dict))  # name, init, seed
    with pool:
        # the random-init runs start while the backbones pretrain
        moco = pool.submit(pretrain, moco_cfg, data['folder'],
                           osp.join(wd, 'moco'), args.pretrain_epochs)
        pending = {moco: 'MoCo v2', supervised: 'supervised'}

        def submit(init: str, checkpoint: Optional[str]) -> None:
            pending.update((pool.submit(finetune, r[5], INIT_DIRS[init], r[4],
                                        checkpoint, images), r) for r in runs
                           if r[3] == init)

        submit('random init', None)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                item = pending.pop(future)
                if isinstance(item, str):  # a pretraining
                    checkpoint, seconds[f'pretrain {item}'] = future.result()
                    print(
                        f'{item} pretrained ({time.time() - started:.0f} s)',
                        flush=True)
                    submit(item, checkpoint)
                    continue
                task, budget, keys, init, seed, _ = item
                metrics, dets, took = future.result()
                for key in keys:
                    name = f'{task}, {budget} labelled, {key.split("/")[1]}'
                    per_seed[name][init][seed] = metrics[key]
                if (seed, budget, task) == (args.seeds[0], budgets[-1],
                                            TASKS[0][0]):
                    detections[init] = dets
                print(
                    f'{task}, {budget} labelled, {init}, seed {seed}: ' +
                    ', '.join(f'{k} {metrics[k] * 100:.1f}' for k in keys) +
                    f' ({took:.0f} s; {time.time() - started:.0f} s)',
                    flush=True)
    results = {
        name: {
            init: [values[seed] for seed in args.seeds]
            for init, values in per_init.items()
        }
        for name, per_init in sorted(per_seed.items(), key=_order)
    }
    print('\n' + summary_table(results, args.seeds))
    elapsed = time.time() - started
    path = figure(results, images, detections, osp.join(wd, 'results.png'))
    saved = dict(
        results=results,
        seeds=args.seeds,
        split=split,
        args=vars(args),
        seconds=dict(seconds, total=round(elapsed, 1)))
    with open(osp.join(wd, 'results.json'), 'w') as f:
        json.dump(saved, f, indent=1)
    print(f'\n{split} scenes; {elapsed:.0f} s; {path}; '
          f'{osp.join(wd, "results.json")}')
    return results


if __name__ == '__main__':
    main()
