# Copyright (c) mocoplug contributors. All rights reserved.
"""Write a tiny VOC-format and a tiny COCO-format detection dataset.

Small images of filled shapes (rectangles, ellipses, triangles) on noise,
with exact boxes and polygon masks, laid out like the real datasets so the
detection configs in ``configs/detection/`` read them unchanged once their
data roots point here::

    OUT_DIR/VOCdevkit/VOC2007/{Annotations,JPEGImages,ImageSets/Main}/
    OUT_DIR/VOCdevkit/VOC2012/{Annotations,JPEGImages,ImageSets/Main}/
    OUT_DIR/coco/{train2017,val2017}/*.jpg
    OUT_DIR/coco/annotations/instances_{train2017,val2017}.json

VOC2007 has ``trainval.txt`` and ``test.txt``, VOC2012 ``trainval.txt``
only (as the real VOC2012, whose test annotations are not public). Every
shape is drawn from its polygon (an ellipse is a 32-gon), so the COCO
polygon is exactly the drawn region and the boxes are the polygon's bounds.
Shapes never overlap. The writers are mocoplug's
(:mod:`mocoplug.datasets.detection_scenes`). The output depends only on
the arguments: the same seed gives the same files, with no download.
Used by the detection tests (the ``tiny_det_data`` fixture of
``tests/detection/conftest.py``).
"""
import math
import os
import os.path as osp
from typing import Dict, List, Sequence, Tuple

import numpy as np
from PIL import Image, ImageDraw

from mocoplug.datasets.detection_scenes import (Scene, write_coco_split,
                                                write_voc_split)

# Each shape is given the name of a real class of the dataset, because
# mmdet's VOCDataset and CocoDataset keep only objects of their classes.
SHAPES = ('rectangle', 'ellipse', 'triangle')
VOC_NAMES = {'rectangle': 'tvmonitor', 'ellipse': 'sheep', 'triangle': 'boat'}
COCO_NAMES = {'rectangle': 'tv', 'ellipse': 'sheep', 'triangle': 'boat'}
COLORS = {
    'rectangle': (220, 40, 40),
    'ellipse': (40, 200, 60),
    'triangle': (40, 80, 230)
}
ELLIPSE_VERTICES = 32

Polygon = List[Tuple[float, float]]


def shape_polygon(shape: str, box: Sequence[int]) -> Polygon:
    """Vertices of ``shape`` inscribed in ``box`` = (x1, y1, x2, y2)."""
    x1, y1, x2, y2 = box
    if shape == 'rectangle':
        return [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
    if shape == 'triangle':
        return [((x1 + x2) / 2, y1), (x2, y2), (x1, y2)]
    if shape == 'ellipse':
        cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 -
                                                                       y1) / 2
        return [(cx + rx * math.cos(t), cy + ry * math.sin(t))
                for t in np.linspace(
                    0, 2 * math.pi, ELLIPSE_VERTICES, endpoint=False)]
    raise ValueError(f'unknown shape {shape!r}; expected one of {SHAPES}')


def _overlaps(box: Sequence[int], boxes: List[Sequence[int]],
              margin: int) -> bool:
    return any(box[0] - margin <= b[2] and b[0] - margin <= box[2] and box[1] -
               margin <= b[3] and b[1] - margin <= box[3] for b in boxes)


def make_image(rng: np.random.RandomState, size: Tuple[int, int],
               max_objects: int) -> Tuple[Image.Image, List[dict]]:
    """One image of 1 to ``max_objects`` non-overlapping shapes on noise.

    Args:
        rng (np.random.RandomState): The random state to draw from.
        size (tuple[int, int]): (width, height) of the image.
        max_objects (int): Most shapes in the image.

    Returns:
        tuple: The RGB image and its objects, each a dict with ``shape``,
        ``polygon`` (float vertices) and ``bbox`` (inclusive integer pixel
        bounds x1, y1, x2, y2 of the drawn region).
    """
    w, h = size
    noise = rng.randint(0, 256, size=(h // 4 + 1, w // 4 + 1, 3))
    background = Image.fromarray(noise.astype(np.uint8)).resize((w, h),
                                                                Image.BILINEAR)
    img = background.copy()
    draw = ImageDraw.Draw(img)
    objects: List[dict] = []
    boxes: List[Sequence[int]] = []
    min_side = max(8, min(w, h) // 5)
    for _ in range(int(rng.randint(1, max_objects + 1))):
        for _attempt in range(50):
            bw = int(rng.randint(min_side, w // 2 + 1))
            bh = int(rng.randint(min_side, h // 2 + 1))
            x1, y1 = int(rng.randint(0, w - bw)), int(rng.randint(0, h - bh))
            box = (x1, y1, x1 + bw - 1, y1 + bh - 1)
            if not _overlaps(box, boxes, margin=2):
                break
        else:
            continue
        shape = SHAPES[int(rng.randint(len(SHAPES)))]
        poly = shape_polygon(shape, box)
        draw.polygon(poly, fill=COLORS[shape])
        # The box is what was drawn: PIL's rasterisation of the polygon.
        mask = Image.new('L', (w, h), 0)
        ImageDraw.Draw(mask).polygon(poly, fill=1)
        ys, xs = np.nonzero(np.asarray(mask))
        bbox = [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())]
        boxes.append(box)
        objects.append(dict(shape=shape, polygon=poly, bbox=bbox))
    if not objects:  # cannot happen with the sizes used; keep it explicit
        raise RuntimeError(f'could not place a shape in a {w}x{h} image')
    return img, objects


def _named(scenes: List[Scene], names: Dict[str, str]) -> List[Scene]:
    """The scenes with each object named by ``names[shape]``."""
    return [(np.asarray(img),
             [dict(obj, name=names[obj['shape']]) for obj in objects])
            for img, objects in scenes]


def coco_categories() -> List[str]:
    """All 80 COCO class names in mmdet's order (ids 1..80).

    mmdet's CocoDataset and CocoMetric map category ids to the 80 labels of
    the detector through the names, so the json lists all of them.
    """
    from mmdet.datasets import CocoDataset
    return list(CocoDataset.METAINFO['classes'])


def make_tiny_detection_data(out_dir: str,
                             seed: int = 0,
                             num_train: int = 4,
                             num_test: int = 3,
                             img_size: Tuple[int, int] = (96, 64),
                             max_objects: int = 3) -> Dict[str, str]:
    """Write the tiny VOC and COCO datasets under ``out_dir``.

    Args:
        out_dir (str): Where to write ``VOCdevkit/`` and ``coco/``.
        seed (int): Seed of everything random. Defaults to 0.
        num_train (int): Images in VOC2007 trainval, VOC2012 trainval and
            COCO train2017 each. Defaults to 4.
        num_test (int): Images in VOC2007 test and COCO val2017 each.
            Defaults to 3.
        img_size (tuple[int, int]): (width, height) of every image, at least
            32 x 32 (mmdet's VOC/COCO configs skip smaller images). Defaults
            to (96, 64).
        max_objects (int): Most shapes per image. Defaults to 3.

    Returns:
        dict: ``voc_root`` and ``coco_root`` (the configs' ``data_root``
        values) and the two COCO annotation files ``coco_train_ann`` and
        ``coco_val_ann``.
    """
    if min(img_size) < 32:
        raise ValueError(f'img_size must be at least (32, 32), got '
                         f'{img_size}: mmdet drops smaller images')
    if num_train < 1 or num_test < 1 or max_objects < 1:
        raise ValueError('num_train, num_test and max_objects must be >= 1')
    rng = np.random.RandomState(seed)
    size = (int(img_size[0]), int(img_size[1]))

    def scenes(num: int) -> List[Scene]:
        return [make_image(rng, size, max_objects) for _ in range(num)]

    voc_root = osp.join(out_dir, 'VOCdevkit')
    for year, splits in (('2007', dict(trainval=num_train, test=num_test)),
                         ('2012', dict(trainval=num_train))):
        for split, num in splits.items():
            voc = _named(scenes(num), VOC_NAMES)
            if split == 'test':
                # the last object of every other image with more than one
                # is "difficult", so evaluation exercises VOC's ignore rule
                for i, (_, objects) in enumerate(voc):
                    if len(objects) > 1 and i % 2 == 1:
                        objects[-1]['difficult'] = 1
            write_voc_split(voc_root, year, split, voc)
    coco_root = osp.join(out_dir, 'coco')
    train_ann = write_coco_split(coco_root, 'train',
                                 _named(scenes(num_train), COCO_NAMES),
                                 coco_categories(), 1)
    val_ann = write_coco_split(coco_root, 'val',
                               _named(scenes(num_test), COCO_NAMES),
                               coco_categories(), 1 + num_train)
    return dict(
        voc_root=voc_root + os.sep,
        coco_root=coco_root + os.sep,
        coco_train_ann=train_ann,
        coco_val_ann=val_ann)
