# Copyright (c) mocoplug contributors. All rights reserved.
"""The tiny_detection_data fixture writes datasets that mmdet reads, whose
annotations match the drawn pixels, and the same files for the same seed."""
import filecmp
import json
import os
import os.path as osp

import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope
from PIL import Image

from . import tiny_detection_data as tiny
from .conftest import COCO_FPN, VOC_C4, shrink_detection_cfg
from .tiny_detection_data import make_tiny_detection_data


def _tree(root):
    return sorted(
        osp.relpath(osp.join(d, f), root) for d, _, files in os.walk(root)
        for f in files)


def test_same_seed_same_files_other_seed_other_data(tmp_path):
    a = make_tiny_detection_data(str(tmp_path / 'a'), seed=3)
    make_tiny_detection_data(str(tmp_path / 'b'), seed=3)
    make_tiny_detection_data(str(tmp_path / 'c'), seed=4)
    files = _tree(tmp_path / 'a')
    assert files == _tree(tmp_path / 'b') == _tree(tmp_path / 'c')
    match, mismatch, errors = filecmp.cmpfiles(
        tmp_path / 'a', tmp_path / 'b', files, shallow=False)
    assert not mismatch and not errors and len(match) == len(files)
    _, mismatch, _ = filecmp.cmpfiles(
        tmp_path / 'a', tmp_path / 'c', files, shallow=False)
    assert len(mismatch) > len(files) // 2
    assert a['voc_root'].endswith('VOCdevkit' + os.sep)


def test_layout_of_the_real_datasets(tiny_det_data):
    voc = tiny_det_data['voc_root']
    for year, splits in (('2007', ['test',
                                   'trainval']), ('2012', ['trainval'])):
        main = osp.join(voc, f'VOC{year}', 'ImageSets', 'Main')
        assert sorted(os.listdir(main)) == [f'{s}.txt' for s in splits]
        for split in splits:
            with open(osp.join(main, f'{split}.txt')) as f:
                ids = f.read().split()
            assert len(ids) == (3 if split == 'test' else 4)
            for i in ids:
                assert osp.isfile(
                    osp.join(voc, f'VOC{year}', 'JPEGImages', f'{i}.jpg'))
                assert osp.isfile(
                    osp.join(voc, f'VOC{year}', 'Annotations', f'{i}.xml'))
    coco = tiny_det_data['coco_root']
    for split, n in (('train', 4), ('val', 3)):
        with open(
                osp.join(coco, 'annotations',
                         f'instances_{split}2017.json')) as f:
            ann = json.load(f)
        assert len(ann['images']) == n
        assert len(ann['categories']) == 80
        assert all(
            osp.isfile(osp.join(coco, f'{split}2017', i['file_name']))
            for i in ann['images'])


def _color_near(img: np.ndarray, xs, ys, color, tol=40) -> bool:
    pixels = img[ys, xs].astype(int)
    return bool(np.abs(pixels.mean(0) - np.array(color)).max() < tol)


def test_coco_polygons_and_boxes_cover_the_drawn_shapes(tiny_det_data):
    from pycocotools.coco import COCO

    shape_of = {v: k for k, v in tiny.COCO_NAMES.items()}
    for split in ('train', 'val'):
        coco = COCO(
            osp.join(tiny_det_data['coco_root'], 'annotations',
                     f'instances_{split}2017.json'))
        assert coco.getAnnIds()
        for ann in coco.loadAnns(coco.getAnnIds()):
            info = coco.imgs[ann['image_id']]
            img = np.asarray(
                Image.open(
                    osp.join(tiny_det_data['coco_root'], f'{split}2017',
                             info['file_name'])).convert('RGB'))
            name = coco.cats[ann['category_id']]['name']
            color = tiny.COLORS[shape_of[name]]
            mask = coco.annToMask(ann).astype(bool)
            ys, xs = np.nonzero(mask)
            # the mask is the shape: its pixels have the shape's colour
            assert _color_near(img, xs, ys, color), (ann, name)
            assert abs(mask.sum() - ann['area']) < 0.25 * ann['area']
            # and the box is the mask's extent (up to the rasterisation of
            # a triangle's tip: PIL draws it, pycocotools drops it)
            x, y, w, h = ann['bbox']
            assert abs(xs.min() - x) <= 2 and abs(ys.min() - y) <= 2
            assert abs(xs.max() + 1 - (x + w)) <= 2
            assert abs(ys.max() + 1 - (y + h)) <= 2


def test_mmdet_datasets_of_the_configs_read_it(tiny_det_data, tmp_path):
    from mmdet.registry import DATASETS

    init_default_scope('mmdet')
    voc_cfg = shrink_detection_cfg(
        Config.fromfile(VOC_C4), tiny_det_data, str(tmp_path))
    train = DATASETS.build(voc_cfg.train_dataloader.dataset)
    test = DATASETS.build(voc_cfg.test_dataloader.dataset)
    assert len(train) == 8 and len(test) == 3
    assert test.metainfo['dataset_type'] == 'VOC2007'
    classes = test.metainfo['classes']
    names, difficult = set(), 0
    for i in range(len(test)):
        info = test.get_data_info(i)
        img = np.asarray(Image.open(info['img_path']).convert('RGB'))
        for inst in info['instances']:
            name = classes[inst['bbox_label']]
            names.add(name)
            difficult += inst['ignore_flag']
            x1, y1, x2, y2 = inst['bbox']  # 0-based after mmdet's "-1"
            shape = {v: k for k, v in tiny.VOC_NAMES.items()}[name]
            # the centre of the box is inside the shape
            cx, cy = (x1 + x2) // 2, (y1 + y2) // 2
            assert _color_near(img, [cx, cx + 1], [cy, cy],
                               tiny.COLORS[shape]), (info, inst)
    assert names <= set(tiny.VOC_NAMES.values()) and len(names) >= 2
    assert difficult >= 1  # VOC's ignore rule gets exercised
    # the shrunk multi-scale resize: shorter side from (480..800) / 20
    resize = voc_cfg.train_dataloader.dataset.datasets[0].pipeline[2]
    assert [h for _, h in resize.scales
            ] == [s // 20 for s in range(480, 801, 32)]
    assert min(train[0]['inputs'].shape[1:]) in {h for _, h in resize.scales}

    coco_cfg = shrink_detection_cfg(
        Config.fromfile(COCO_FPN), tiny_det_data, str(tmp_path))
    coco_train = DATASETS.build(coco_cfg.train_dataloader.dataset)
    assert len(coco_train) == 4
    sample = coco_train[0]['data_samples']
    assert len(sample.gt_instances.masks) == len(sample.gt_instances.bboxes)
    assert len(sample.gt_instances.bboxes) >= 1


def test_arguments_and_bad_size(tmp_path):
    paths = make_tiny_detection_data(
        str(tmp_path), seed=1, num_train=2, num_test=1, img_size=(64, 48))
    with open(paths['coco_val_ann']) as f:
        ann = json.load(f)
    assert [(i['width'], i['height']) for i in ann['images']] == [(64, 48)]
    with pytest.raises(ValueError, match='at least'):
        make_tiny_detection_data(str(tmp_path / 'x'), img_size=(16, 64))
