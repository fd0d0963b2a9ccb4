# Copyright (c) mocoplug contributors. All rights reserved.
"""Shared set-up of the detection-transfer tests: the tiny datasets, the
shipped configs shrunk for CPU, and a MoCo v2 ResNet-50 checkpoint made by
a few real pretraining iterations."""
import copy
import glob
import importlib.util
import itertools
import os
import os.path as osp
from collections import Counter
from contextlib import contextmanager
from typing import Dict, Iterator, Optional

import pytest
from mmengine.config import Config

from mocoplug.utils import walk_dicts
from .tiny_detection_data import make_tiny_detection_data

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DETECTION_CONFIGS = sorted(
    glob.glob(osp.join(ROOT, 'configs', 'detection', '*.py')))
VOC_C4 = osp.join(ROOT, 'configs', 'detection',
                  'faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py')
COCO_C4 = osp.join(ROOT, 'configs', 'detection',
                   'mask-rcnn_r50-c4_syncbn-ms-1x_coco.py')
COCO_FPN = osp.join(ROOT, 'configs', 'detection',
                    'mask-rcnn_r50-fpn_syncbn-ms-1x_coco.py')
MOCOV2 = osp.join(ROOT, 'configs',
                  'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py')
_RUN_IDS = itertools.count()


@contextmanager
def restored_default_scope() -> Iterator[None]:
    """Undo the default scope that Runners and init_default_scope('mmdet')
    set (mmengine's current scope is the last DefaultScope created), so
    that tests run after these see the scope they would have seen."""
    from mmengine.registry import DefaultScope

    saved = dict(DefaultScope._instance_dict)
    try:
        yield
    finally:
        DefaultScope._instance_dict.clear()
        DefaultScope._instance_dict.update(saved)


@pytest.fixture(autouse=True)
def _restore_default_scope():
    with restored_default_scope():
        yield


def load_tool(name: str):
    """Import a script of tools/ (not a package) as a module."""
    path = osp.join(ROOT, 'tools', f'{name}.py')
    spec = importlib.util.spec_from_file_location(f'tools_det_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DEMO = load_tool('demo_detection')


def sync_bn_to_bn(cfg: Config) -> Config:
    """SyncBN -> BN in the model: one process, no process group."""
    return DEMO.single_process_cfg(cfg)


def unique_name(prefix: str) -> str:
    return f'{prefix}-{os.getpid()}-{next(_RUN_IDS)}'


def shrink_detection_cfg(cfg: Config,
                         data: Dict[str, str],
                         work_dir: str,
                         max_iters: int = 2) -> Config:
    """A shipped detection config for a CPU run on the tiny data.

    Overrides only what a CPU smoke run needs: the data paths, the image
    scales (/20), the length of training (``max_iters`` iterations or one
    epoch, PreciseBN over one batch), no loader workers, SyncBN -> BN, and
    the test score threshold (0, so that a detector trained for two steps
    still outputs boxes for the metrics to score) and 100 test proposals
    an image. Model, optimizer,
    schedule shape, evaluators and hooks stay as shipped.
    """
    keys = ('train_dataloader', 'val_dataloader', 'test_dataloader',
            'val_evaluator', 'test_evaluator')
    cfg = DEMO.single_process_cfg(
        copy.deepcopy(cfg),
        lambda scales: [(w // 20, h // 20) for w, h in scales],
        lambda scale: tuple(s // 20 for s in scale), keys)
    roots = {
        'data/VOCdevkit/': data['voc_root'],
        'data/coco/': data['coco_root']
    }

    def fix(node: dict) -> None:
        for key, value in node.items():
            if isinstance(value, str):
                for old, new in roots.items():
                    if value.startswith(old):
                        node[key] = new + value[len(old):]

    for key in keys:
        walk_dicts(cfg[key], fix)
        if key.endswith('dataloader'):
            cfg[key].num_workers = 0
            cfg[key].persistent_workers = False
    if cfg.train_cfg.type == 'IterBasedTrainLoop':
        cfg.train_cfg.max_iters = max_iters
        cfg.train_cfg.val_interval = max_iters
    else:
        cfg.train_cfg.max_epochs = 1
    for hook in cfg.get('custom_hooks', []):
        if hook.type == 'DetectionPreciseBNHook':
            hook.num_iters = 1
    cfg.model.test_cfg.rcnn.score_thr = 0.0
    # 100 proposals an image at test time: with 1000, 80 classes and no
    # score threshold, mmcv's batched_nms goes class by class (~2 s an image)
    cfg.model.test_cfg.rpn.max_per_img = 100
    cfg.work_dir = work_dir
    cfg.experiment_name = unique_name(osp.basename(work_dir))
    cfg.randomness = dict(seed=0)
    return cfg


@pytest.fixture
def served_kernel_calls(monkeypatch) -> Optional[Counter]:
    """Calls of the mmcv kernels that mocoplug serves, by name; None where
    compiled mmcv runs its own (the test then checks the rest only)."""
    from mocoplug.compat.mmcv_ops import SERVED, ServedOps, serve_mmcv_ops

    calls = Counter()
    if serve_mmcv_ops() is None:
        return None

    def counted(name, fn):

        def call(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return staticmethod(call)

    for name in SERVED:
        monkeypatch.setattr(ServedOps, name,
                            counted(name, getattr(ServedOps, name)))
    return calls


def dump(cfg: Config, path: str) -> str:
    cfg.dump(path)
    return path


@pytest.fixture(scope='session')
def tiny_det_data(tmp_path_factory) -> Dict[str, str]:
    """The tiny VOC and COCO datasets of :mod:`.tiny_detection_data`."""
    out = str(tmp_path_factory.mktemp('tiny_det'))
    return make_tiny_detection_data(out, seed=0)


@pytest.fixture(scope='session')
def mocov2_r50_checkpoint(tmp_path_factory) -> str:
    """A real MoCo v2 ResNet-50 checkpoint: two iterations of the shipped
    pretraining config through tools/train.py, overridden only in data
    (16 scikit-learn digits, 64 px crops, batch 8, no workers), length (one
    epoch) and shuffle_bn='none' (one process)."""
    work_dir = str(tmp_path_factory.mktemp('mocov2_pretrain'))
    cfg = Config.fromfile(MOCOV2)
    view = copy.deepcopy(cfg.view_pipeline)
    assert view[0].type == 'RandomResizedCrop'
    view[0].scale = 64
    cfg.train_dataloader.dataset = dict(
        type='DigitsDataset',
        _scope_='mocoplug',
        split='train',
        with_label=False,
        img_size=64,
        indices=16,
        pipeline=[
            dict(type='MultiView', num_views=2, transforms=[view]),
            dict(type='PackInputs')
        ])
    cfg.train_dataloader.batch_size = 8
    cfg.train_dataloader.num_workers = 0
    cfg.train_dataloader.persistent_workers = False
    cfg.train_cfg.max_epochs = 1
    cfg.model.shuffle_bn = 'none'
    cfg.experiment_name = unique_name('mocov2_pretrain')
    cfg.randomness = dict(seed=0)
    path = dump(cfg, osp.join(work_dir, 'mocov2_tiny.py'))
    with restored_default_scope():
        load_tool('train').main([path, '--work-dir', work_dir])
    ckpt = osp.join(work_dir, 'epoch_1.pth')
    assert osp.isfile(ckpt), os.listdir(work_dir)
    return ckpt
