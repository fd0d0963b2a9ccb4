# Copyright (c) mocoplug contributors. All rights reserved.
"""A user's own mmdet config (mmdet's bases, their data, a MoCo backbone
through ``init_cfg``, no ``custom_imports``) through mmdet's own
tools/train.py and tools/test.py, in fresh processes that never import
mocoplug: the ``.pth`` hook installed with mocoplug serves ``mmcv._ext``."""
import json
import os.path as osp
import subprocess
import sys

import torch

from ..packaged_tools import packaged_tool
from .conftest import load_tool

CONFIG = """
_base_ = [
    'mmdet::_base_/models/faster-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py'
]
model = dict(
    # MoCo's protocol: BN trained in the detector (MoCo's features are not
    # normalised as a supervised network's)
    backbone=dict(
        norm_eval=False,
        init_cfg=dict(type='Pretrained', checkpoint={backbone!r})),
    # boxes from a detector trained for two steps, for the metric to score
    # (100 proposals: with 1000 x 80 classes, batched_nms goes class by
    # class)
    test_cfg=dict(rpn=dict(max_per_img=100), rcnn=dict(score_thr=0.0)))
data_root = {data_root!r}
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(128, 96), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(128, 96), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                    'scale_factor'))
]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root,
                                     pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root,
                                   pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(max_epochs=1)
"""

# runs mmdet's tools/train.py, then its tools/test.py, each as
# `python TOOL ARGS` does (one process: one start-up), then states that
# mocoplug was never imported; mmengine's config formatter as the suite's
# (tests/conftest.py: yapf's layout skipped, the syntax still checked)
RUN_TOOLS = ('import ast, json, runpy, sys\n'
             'import mmengine.config.config as mmengine_config\n'
             'def parse_only(text, **kwargs):\n'
             '    ast.parse(text)\n'
             '    return text, None\n'
             'mmengine_config.FormatCode = parse_only\n'
             'for argv in json.loads(sys.argv[1]):\n'
             '    sys.argv = argv\n'
             "    runpy.run_path(argv[0], run_name='__main__')\n"
             "    print('TOOL DONE', flush=True)\n"
             "assert 'mocoplug' not in sys.modules\n"
             "print('served:', type(sys.modules['mmcv._ext']).__name__)\n")


def test_users_own_config_trains_and_tests_with_mmdets_tools(
        tiny_det_data, mocov2_r50_checkpoint, tmp_path):
    backbone = str(tmp_path / 'r50_moco.pth')
    load_tool('model_converters/extract_backbone').main(
        [mocov2_r50_checkpoint, backbone, '--format', 'torchvision'])
    config = tmp_path / 'faster-rcnn_r50_fpn_moco_mine.py'
    config.write_text(
        CONFIG.format(backbone=backbone, data_root=tiny_det_data['coco_root']))
    work_dir = str(tmp_path / 'work')
    ckpt = osp.join(work_dir, 'epoch_1.pth')
    tools = [[
        packaged_tool('mmdet', 'train'),
        str(config), '--work-dir', work_dir
    ],
             [
                 packaged_tool('mmdet', 'test'),
                 str(config), ckpt, '--work-dir', work_dir
             ]]
    out = subprocess.run([sys.executable, '-c', RUN_TOOLS,
                          json.dumps(tools)],
                         cwd=tmp_path,
                         capture_output=True,
                         text=True)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    train_log, test_log = (out.stdout + out.stderr).split('TOOL DONE')[:2]
    assert 'served: ServedOps' in out.stdout  # mmcv-lite, served
    assert f'load model from: {backbone}' in train_log
    assert 'bbox_mAP' in train_log  # the validation after the epoch ran
    assert 'coco/bbox_mAP:' in test_log  # test.py read the checkpoint
    trained = torch.load(ckpt, map_location='cpu', weights_only=False)
    moco = torch.load(backbone, map_location='cpu')
    # trained from the MoCo weights (one epoch moved them a little)
    conv1 = trained['state_dict']['backbone.conv1.weight']
    assert conv1.shape == moco['conv1.weight'].shape
    assert (conv1 - moco['conv1.weight']).abs().max() < 0.05


def test_the_docs_own_config_trains_the_whole_backbone_with_sync_bn(tmp_path):
    """docs/user_guides/detection_transfer.md's "your own config" snippet,
    as written there: every backbone parameter trains and every BN layer
    is a SyncBN in training mode (MoCo's protocol; mmdet's base has
    frozen_stages=1: the stem and res2 frozen, their BN in eval)."""
    import re

    import torch.nn as nn
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config
    page = osp.join(
        osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'docs',
        'user_guides', 'detection_transfer.md')
    with open(page) as f:
        snippet, = re.findall(
            r'```python\n(# my_faster-rcnn_r50_fpn_moco_mydata.py\n.*?)```',
            f.read(), re.S)
    path = tmp_path / 'my_faster-rcnn_r50_fpn_moco_mydata.py'
    path.write_text(snippet)
    register_all_modules(init_default_scope=False)
    backbone = MODELS.build(Config.fromfile(str(path)).model.backbone)
    backbone.train()
    params = dict(backbone.named_parameters())
    assert params and all(p.requires_grad for p in params.values())
    norms = [
        m for m in backbone.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
    ]
    assert norms and all(
        isinstance(m, nn.SyncBatchNorm) and m.training for m in norms)
