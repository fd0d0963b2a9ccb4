# Copyright (c) mocoplug contributors. All rights reserved.
"""The detection configs follow the MoCo transfer protocol and build."""
import copy
import os.path as osp

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import init_default_scope
from torch.nn.modules.batchnorm import _BatchNorm

from mocoplug.utils import fill_pretrained, walk_dicts
from .conftest import DETECTION_CONFIGS, sync_bn_to_bn

TORCHVISION_MEAN = [123.675, 116.28, 103.53]
TORCHVISION_STD = [58.395, 57.12, 57.375]
NAMES = [osp.basename(p) for p in DETECTION_CONFIGS]


def is_c4(path: str) -> bool:
    return '-c4_' in osp.basename(path)


def test_the_five_protocol_configs_exist():
    assert sorted(NAMES) == [
        'faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py',
        'mask-rcnn_r50-c4_syncbn-ms-1x_coco.py',
        'mask-rcnn_r50-c4_syncbn-ms-2x_coco.py',
        'mask-rcnn_r50-fpn_syncbn-ms-1x_coco.py',
        'mask-rcnn_r50-fpn_syncbn-ms-2x_coco.py',
    ]


@pytest.fixture(scope='module', params=DETECTION_CONFIGS, ids=NAMES)
def config(request):
    return request.param, Config.fromfile(request.param)


def test_header_gives_the_command_and_pretrained_is_an_option(config):
    path, cfg = config
    with open(path) as f:
        text = f.read()
    # the exact command, with this file's path
    assert 'tools/dist_train.sh' in text
    assert f'configs/detection/{osp.basename(path)}' in text
    assert '--cfg-options pretrained=' in text
    assert cfg.pretrained is None
    assert cfg.default_scope == 'mmdet'
    assert 'mocoplug' in cfg.custom_imports.imports
    assert cfg.custom_imports.allow_failed_imports is False


def test_moco_initialisation_of_backbone_and_c4_res5(config):
    path, cfg = config
    # C4: the backbone leaves res5 to the shared head, stated
    assert cfg.model.backbone.init_cfg == dict(
        type='Pretrained',
        _scope_='mocoplug',
        checkpoint=None,
        prefix='backbone.',
        **(dict(unread=['layer4.']) if is_c4(path) else {}))
    cfg = copy.deepcopy(cfg)
    cfg.pretrained = 'moco.pth'
    expected = 2 if is_c4(path) else 1
    assert fill_pretrained(cfg) == expected
    assert cfg.model.backbone.init_cfg.checkpoint == 'moco.pth'
    if is_c4(path):
        head = cfg.model.roi_head.shared_head
        assert head.type == 'ResLayerExtraNorm'
        assert head.init_cfg.checkpoint == 'moco.pth'
        assert head.init_cfg.keep_init == ['norm.']  # the extra norm
        assert head.init_cfg.unread == [
            'conv1.', 'bn1.', 'layer1.', 'layer2.', 'layer3.'
        ]


def test_torchvision_style_input_is_read_by_the_model(config):
    _, cfg = config
    # the model's preprocessor is the one mmdet uses; a top-level
    # `data_preprocessor` (mmselfsup's VOC bug) would be silently ignored
    assert 'data_preprocessor' not in cfg
    pre = cfg.model.data_preprocessor
    assert pre.mean == TORCHVISION_MEAN and pre.std == TORCHVISION_STD
    assert pre.bgr_to_rgb is True


def test_syncbn_everywhere_and_all_stages_trained(config):
    path, cfg = config
    norms = []
    walk_dicts(
        cfg.model, lambda node: norms.append(node['norm_cfg'])
        if node.get('norm_cfg') is not None else None)
    assert norms and all(n == dict(type='SyncBN', requires_grad=True)
                         for n in norms), norms
    model = cfg.model
    assert model.backbone.frozen_stages == -1
    assert model.backbone.norm_eval is False
    assert model.backbone.style == 'pytorch'
    if is_c4(path):
        assert model.roi_head.shared_head.norm_eval is False
        assert model.roi_head.shared_head.style == 'pytorch'
        assert len(norms) == 2  # backbone, res5 (+ its extra norm)
    else:  # "SyncBN in backbone and FPN/heads"
        assert len(norms) == 4
        assert model.neck.norm_cfg.type == 'SyncBN'
        assert model.roi_head.bbox_head.type == 'Shared4Conv1FCBBoxHead'
        assert model.roi_head.bbox_head.norm_cfg.type == 'SyncBN'
        assert model.roi_head.mask_head.norm_cfg.type == 'SyncBN'


def _resize_steps(pipeline):
    for t in pipeline:
        if t.type == 'RandomChoiceResize':
            assert all(w == 1333 and t.keep_ratio for w, _ in t.scales)
            return [h for _, h in t.scales]
    raise AssertionError('no RandomChoiceResize in the train pipeline')


def test_schedule_and_multiscale(config):
    path, cfg = config
    name = osp.basename(path)
    assert cfg.optim_wrapper.optimizer == dict(
        type='SGD', lr=0.02, momentum=0.9, weight_decay=1e-4)
    assert cfg.optim_wrapper.paramwise_cfg.norm_decay_mult == 0.
    assert cfg.train_dataloader.batch_size == 2  # x 8 GPUs = 16
    warmup, steps = cfg.param_scheduler
    assert warmup.type == 'LinearLR' and warmup.start_factor == 0.001
    test_resize = [
        t for t in cfg.test_dataloader.dataset.pipeline if t.type == 'Resize'
    ]
    assert test_resize[0].scale == (1333, 800)
    if 'voc' in name:
        assert cfg.train_cfg.type == 'IterBasedTrainLoop'
        assert cfg.train_cfg.max_iters == 24000
        assert steps.milestones == [18000, 22000] and steps.end == 24000
        assert warmup.end == 100 and warmup.by_epoch is False
        datasets = cfg.train_dataloader.dataset.datasets
        assert [d.ann_file for d in datasets] == [
            'VOC2007/ImageSets/Main/trainval.txt',
            'VOC2012/ImageSets/Main/trainval.txt'
        ]
        assert cfg.test_dataloader.dataset.ann_file == (
            'VOC2007/ImageSets/Main/test.txt')
        assert _resize_steps(datasets[0].pipeline) == list(range(480, 801, 32))
    else:
        epochs = 24 if '-2x_' in name else 12
        assert cfg.train_cfg.type == 'EpochBasedTrainLoop'
        assert cfg.train_cfg.max_epochs == epochs  # not mmselfsup's 12
        assert steps.by_epoch and steps.end == epochs
        assert steps.milestones == ([16, 22] if epochs == 24 else [8, 11])
        assert warmup.end == 1000
        assert _resize_steps(cfg.train_dataloader.dataset.pipeline) == list(
            range(640, 801, 32))
        assert cfg.val_evaluator.metric == ['bbox', 'segm']


VOC_CONFIGS = [p for p in DETECTION_CONFIGS if 'voc' in osp.basename(p)]
C4_CONFIGS = [p for p in DETECTION_CONFIGS if is_c4(p)]


@pytest.mark.parametrize('path', VOC_CONFIGS, ids=osp.basename)
def test_voc_reports_ap50_ap75_and_coco_style_ap(path):
    assert VOC_CONFIGS
    cfg = Config.fromfile(path)
    ev = cfg.val_evaluator
    assert ev.type == 'VOCMetric' and ev.eval_mode == '11points'
    assert [int(t * 100) for t in ev.iou_thrs] == list(range(50, 100, 5))


def test_precise_bn_on_the_c4_configs(config):
    path, cfg = config
    hooks = [
        h for h in cfg.get('custom_hooks', [])
        if h.type == 'DetectionPreciseBNHook'
    ]
    if not is_c4(path):
        assert not hooks
        return
    assert len(hooks) == 1 and hooks[0].num_iters == 200
    # recomputed before every evaluation
    interval = hooks[0].interval
    if cfg.train_cfg.type == 'IterBasedTrainLoop':
        assert interval == cfg.train_cfg.val_interval == 24000
    else:
        assert interval == cfg.train_cfg.val_interval == 1


def test_model_builds_for_one_process(config):
    """With SyncBN -> BN (no process group on one CPU)."""
    path, cfg = config
    from mmdet.registry import MODELS

    init_default_scope('mmdet')
    model = MODELS.build(sync_bn_to_bn(copy.deepcopy(cfg)).model)
    model.train()
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    assert bns and all(m.training for m in bns)  # norm_eval=False
    assert all(p.requires_grad for p in model.parameters())  # not frozen
    pre = model.data_preprocessor
    assert torch.allclose(pre.mean.flatten(), torch.tensor(TORCHVISION_MEAN))
    assert torch.allclose(pre.std.flatten(), torch.tensor(TORCHVISION_STD))
    assert pre._channel_conversion
    backbone = model.backbone
    # pytorch style = torchvision's ResNet: stride in the 3x3 conv
    assert backbone.layer2[0].conv1.stride == (1, 1)
    assert backbone.layer2[0].conv2.stride == (2, 2)
    num_classes = 20 if 'voc' in path else 80
    assert model.roi_head.bbox_head.num_classes == num_classes
    if is_c4(path):
        assert not hasattr(backbone, 'layer4')
        head = model.roi_head.shared_head
        assert type(head).__name__ == 'ResLayerExtraNorm'
        assert isinstance(head.norm, nn.BatchNorm2d)
        assert head.norm.num_features == 2048
        assert head.layer4[0].conv2.stride == (2, 2)
    else:
        assert model.neck.fpn_convs[0].norm_name
        assert len(model.roi_head.bbox_head.shared_convs) == 4


@pytest.mark.parametrize('path', C4_CONFIGS, ids=osp.basename)
def test_c4_res5_is_followed_by_the_extra_norm(path):
    """mmpretrain's ResLayerExtraNorm = detectron2's Res5ROIHeadsExtraNorm:
    the norm is applied to the output of res5 (after its last ReLU)."""
    cfg = Config.fromfile(path)
    from mmdet.registry import MODELS

    init_default_scope('mmdet')
    head = MODELS.build(
        sync_bn_to_bn(copy.deepcopy(cfg)).model.roi_head.shared_head)
    head.eval()
    with torch.no_grad():
        head.norm.running_mean.uniform_(0, 1)
        head.norm.running_var.uniform_(1, 2)
        head.norm.weight.uniform_(0.5, 1.5)
        head.norm.bias.uniform_(-1, 1)
        x = torch.randn(2, 1024, 14, 14)
        res5 = head.layer4(x)
        expected = nn.functional.batch_norm(res5, head.norm.running_mean,
                                            head.norm.running_var,
                                            head.norm.weight, head.norm.bias)
        assert res5.min() >= 0  # the last block ends with a ReLU
        out = head(x)
    assert out.shape == (2, 2048, 7, 7)
    # the head runs the same layer4 and batch_norm kernels on the same
    # input: the same values (atol only states that no more is claimed)
    assert torch.allclose(out, expected, atol=1e-5)
