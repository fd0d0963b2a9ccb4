# Copyright (c) mocoplug contributors. All rights reserved.
"""The evaluators of the detection configs report what the MoCo protocol
reports, checked on predictions with known scores."""
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope

from .conftest import COCO_C4, COCO_FPN, VOC_C4, shrink_detection_cfg


def _voc_scores(cfg, dataset, expand_to_iou=None):
    """Run the config's VOCMetric on the ground truth of ``dataset`` as
    predictions, each box optionally grown about its centre so that its
    IoU with the ground truth (VOC's +1 pixel convention) is
    ``expand_to_iou``."""
    from mmdet.registry import METRICS

    metric = METRICS.build(cfg.val_evaluator)
    metric.dataset_meta = dataset.metainfo
    samples = []
    for i in range(len(dataset)):
        sample = dataset[i]['data_samples']
        gt = sample.gt_instances
        # the test pipeline loads boxes at the original scale
        boxes = gt.bboxes.tensor.clone().float()
        if expand_to_iou is not None:
            grow = 1 / np.sqrt(expand_to_iou)
            centre = (boxes[:, :2] + boxes[:, 2:]) / 2
            size = (boxes[:, 2:] - boxes[:, :2] + 1) * grow - 1
            boxes = torch.cat([centre - size / 2, centre + size / 2], 1)
        samples.append(
            dict(
                gt_instances=dict(bboxes=gt.bboxes.tensor, labels=gt.labels),
                ignored_instances=dict(
                    bboxes=sample.ignored_instances.bboxes.tensor,
                    labels=sample.ignored_instances.labels),
                pred_instances=dict(
                    bboxes=boxes,
                    scores=torch.ones(len(boxes)),
                    labels=gt.labels)))
    metric.process({}, samples)
    return metric.evaluate(len(samples))


@pytest.fixture(scope='module')
def voc_test(tiny_det_data, tmp_path_factory):
    from mmdet.registry import DATASETS

    cfg = shrink_detection_cfg(
        Config.fromfile(VOC_C4), tiny_det_data,
        str(tmp_path_factory.mktemp('voc_eval')))
    with DefaultScope.overwrite_default_scope('mmdet'):
        dataset = DATASETS.build(cfg.test_dataloader.dataset)
    assert sum(
        len(dataset[i]['data_samples'].ignored_instances)
        for i in range(len(dataset))) >= 1  # a "difficult" box
    return cfg, dataset


def test_voc_perfect_detections_score_one_everywhere(voc_test):
    scores = _voc_scores(*voc_test)
    names = [f'pascal_voc/AP{t}' for t in range(50, 100, 5)]
    assert sorted(scores) == sorted(names + ['pascal_voc/mAP'])
    # difficult boxes are ignored, not missed: recall 1, AP 1
    assert all(scores[n] == 1.0 for n in names)
    assert scores['pascal_voc/mAP'] == pytest.approx(1.0)


def test_voc_map_is_detectron2_ap_averaged_over_iou_thresholds(voc_test):
    """Boxes with IoU 0.775: detected at IoU 0.50-0.75, missed at 0.80-0.95,
    so AP50 = AP75 = 1, AP80 = 0 and AP (pascal_voc/mAP) = 6/10."""
    scores = _voc_scores(*voc_test, expand_to_iou=0.775)
    for t in range(50, 100, 5):
        assert scores[f'pascal_voc/AP{t}'] == (1.0 if t <= 75 else 0.0), t
    assert scores['pascal_voc/mAP'] == pytest.approx(0.6)


@pytest.mark.parametrize('config', [COCO_FPN, COCO_C4], ids=osp.basename)
def test_coco_perfect_boxes_and_masks_score_one(config, tiny_det_data,
                                                tmp_path):
    """The tiny COCO json lists the 80 categories, so the detector's label
    i is category i + 1 for mmdet's CocoDataset and CocoMetric."""
    from mmdet.datasets import CocoDataset
    from mmdet.registry import METRICS
    from pycocotools.coco import COCO

    init_default_scope('mmdet')
    cfg = shrink_detection_cfg(
        Config.fromfile(config), tiny_det_data, str(tmp_path))
    metric = METRICS.build(cfg.val_evaluator)
    metric.dataset_meta = CocoDataset.METAINFO
    coco = COCO(cfg.val_evaluator.ann_file)
    samples = []
    for img_id, info in coco.imgs.items():
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[img_id]))
        boxes = torch.tensor([[x, y, x + w, y + h]
                              for x, y, w, h in (a['bbox'] for a in anns)],
                             dtype=torch.float32)
        masks = torch.from_numpy(
            np.stack([coco.annToMask(a) for a in anns]).astype(bool))
        samples.append(
            dict(
                img_id=img_id,
                ori_shape=(info['height'], info['width']),
                pred_instances=dict(
                    bboxes=boxes,
                    scores=torch.ones(len(anns)),
                    labels=torch.tensor([a['category_id'] - 1 for a in anns]),
                    masks=masks)))
    metric.process({}, samples)
    scores = metric.evaluate(len(samples))
    for kind in ('bbox', 'segm'):
        for key in ('mAP', 'mAP_50', 'mAP_75', 'mAP_m'):
            assert scores[f'coco/{kind}_{key}'] == pytest.approx(1.0), key
        # no object is large (> 96^2 px) in a 96 x 64 image
        assert scores[f'coco/{kind}_mAP_l'] == -1.0
