# Copyright (c) mocoplug contributors. All rights reserved.
"""Digit scenes: objects from the right split, masks and boxes matching the
strokes, and COCO masks that pycocotools reads back exactly."""
import json
import os.path as osp

import numpy as np

from mocoplug.datasets import DigitsDataset
from mocoplug.datasets.detection_scenes import (digit_scenes, write_coco_split,
                                                write_voc_split)


def test_scenes_are_seeded_and_annotations_match_the_strokes():
    a = digit_scenes('train', 6, seed=3, size=64)
    b = digit_scenes('train', 6, seed=3, size=64)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b))
    assert not np.array_equal(a[0][0], digit_scenes('train', 1, seed=4)[0][0])
    counts = [len(objects) for _, objects in a]
    assert min(counts) >= 1 and max(counts) <= 3 and len(set(counts)) > 1
    for img, objects in a:
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8
        covered = np.zeros((64, 64), int)
        for obj in objects:
            assert obj['name'] in {str(i) for i in range(10)}
            ys, xs = np.nonzero(obj['mask'])
            assert obj['bbox'] == [xs.min(), ys.min(), xs.max(), ys.max()]
            assert 8 <= xs.max() - xs.min() + 1 <= 32
            assert (img[obj['mask'], 0] > 64).all()
            covered += obj['mask']
        assert covered.max() == 1  # digits never overlap
        assert (img[covered == 0, 0] <= 64).all()  # nothing else drawn


def test_train_and_test_scenes_use_their_own_digits():
    for split in ('train', 'test'):
        own = {d['digits_index'] for d in DigitsDataset(split=split)}
        digits = [
            obj['digit'] for _, objects in digit_scenes(split, 50, seed=0)
            for obj in objects
        ]
        assert set(digits) <= own and len(set(digits)) > 50


def test_voc_and_coco_files(tmp_path):
    from pycocotools.coco import COCO

    scenes = digit_scenes('test', 3, seed=0)
    ids = write_voc_split(str(tmp_path / 'voc'), '2007', 'test', scenes)
    assert ids == ['2007_test_0000', '2007_test_0001', '2007_test_0002']
    assert osp.isfile(tmp_path / 'voc/VOC2007/JPEGImages/2007_test_0000.jpg')
    ann = write_coco_split(
        str(tmp_path / 'coco'), 'val', scenes, [str(i) for i in range(10)])
    coco = COCO(ann)
    with open(ann) as f:
        assert [c['name'] for c in json.load(f)['categories']
                ] == [str(i) for i in range(10)]
    for image_id, (_, objects) in zip(sorted(coco.imgs), scenes):
        anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
        assert len(anns) == len(objects)
        for a, obj in zip(anns, objects):
            assert np.array_equal(coco.annToMask(a).astype(bool), obj['mask'])
            assert a['area'] == obj['mask'].sum()
            assert coco.cats[a['category_id']]['name'] == obj['name']
