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
Shapes never overlap. The output depends only on the arguments: the same
seed gives the same files, with no download. Used by the detection tests
(the ``tiny_det_data`` fixture of ``tests/detection/conftest.py``).
"""
import json
import math
import os
import os.path as osp
from typing import Dict, List, Sequence, Tuple
from xml.etree import ElementTree as ET

import numpy as np
from PIL import Image, ImageDraw

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


def polygon_area(poly: Polygon) -> float:
    """Area of a simple polygon (shoelace formula)."""
    xs = np.array([p[0] for p in poly])
    ys = np.array([p[1] for p in poly])
    return float(
        abs(np.dot(xs, np.roll(ys, -1)) - np.dot(ys, np.roll(xs, -1))) / 2)


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


def _voc_xml(filename: str, size: Tuple[int, int],
             objects: List[dict]) -> ET.ElementTree:
    """A VOC annotation; VOC boxes are 1-based inclusive pixel indices."""
    root = ET.Element('annotation')
    ET.SubElement(root, 'folder').text = 'VOC'
    ET.SubElement(root, 'filename').text = filename
    node = ET.SubElement(root, 'size')
    for tag, value in zip(('width', 'height', 'depth'), (*size, 3)):
        ET.SubElement(node, tag).text = str(value)
    ET.SubElement(root, 'segmented').text = '0'
    for obj in objects:
        node = ET.SubElement(root, 'object')
        ET.SubElement(node, 'name').text = VOC_NAMES[obj['shape']]
        ET.SubElement(node, 'pose').text = 'Unspecified'
        ET.SubElement(node, 'truncated').text = '0'
        ET.SubElement(node, 'difficult').text = str(obj.get('difficult', 0))
        box = ET.SubElement(node, 'bndbox')
        for tag, value in zip(('xmin', 'ymin', 'xmax', 'ymax'), obj['bbox']):
            ET.SubElement(box, tag).text = str(value + 1)
    ET.indent(root)
    return ET.ElementTree(root)


def write_voc_year(root: str, year: str, splits: Dict[str, int],
                   rng: np.random.RandomState, size: Tuple[int, int],
                   max_objects: int) -> Dict[str, List[str]]:
    """Write ``VOC{year}`` with ``splits[name]`` images in each image set.

    In the ``test`` split the last object of every other image with more
    than one object is marked ``difficult``, as VOC does for hard objects,
    so evaluation exercises VOC's ignore rule.

    Returns:
        dict: The image ids of each split.
    """
    base = osp.join(root, f'VOC{year}')
    for sub in ('Annotations', 'JPEGImages', osp.join('ImageSets', 'Main')):
        os.makedirs(osp.join(base, sub), exist_ok=True)
    ids: Dict[str, List[str]] = {}
    for split, count in splits.items():
        ids[split] = []
        for i in range(count):
            img_id = f'{year}_{split}_{i:04d}'
            img, objects = make_image(rng, size, max_objects)
            if split == 'test' and len(objects) > 1 and i % 2 == 1:
                objects[-1]['difficult'] = 1
            img.save(osp.join(base, 'JPEGImages', f'{img_id}.jpg'), quality=95)
            _voc_xml(f'{img_id}.jpg', size, objects).write(
                osp.join(base, 'Annotations', f'{img_id}.xml'))
            ids[split].append(img_id)
        with open(osp.join(base, 'ImageSets', 'Main', f'{split}.txt'),
                  'w') as f:
            f.write(''.join(f'{i}\n' for i in ids[split]))
    return ids


def coco_categories() -> List[dict]:
    """All 80 COCO categories, ids 1..80 in mmdet's class order.

    mmdet's CocoDataset and CocoMetric map category ids to the 80 labels of
    the detector through the names, so the json lists all of them.
    """
    from mmdet.datasets import CocoDataset
    return [
        dict(id=i + 1, name=name, supercategory='object')
        for i, name in enumerate(CocoDataset.METAINFO['classes'])
    ]


def write_coco_split(root: str, split: str, count: int,
                     rng: np.random.RandomState, size: Tuple[int, int],
                     max_objects: int, first_image_id: int) -> str:
    """Write ``{split}2017/`` images and their instances json.

    Returns:
        str: The path of the annotation file.
    """
    img_dir = osp.join(root, f'{split}2017')
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    categories = coco_categories()
    cat_ids = {c['name']: c['id'] for c in categories}
    images, annotations = [], []
    for i in range(count):
        image_id = first_image_id + i
        file_name = f'{image_id:012d}.jpg'
        img, objects = make_image(rng, size, max_objects)
        img.save(osp.join(img_dir, file_name), quality=95)
        images.append(
            dict(
                id=image_id,
                file_name=file_name,
                width=size[0],
                height=size[1]))
        for obj in objects:
            x1, y1, x2, y2 = obj['bbox']
            annotations.append(
                dict(
                    id=len(annotations) + 1,
                    image_id=image_id,
                    category_id=cat_ids[COCO_NAMES[obj['shape']]],
                    bbox=[x1, y1, x2 - x1 + 1, y2 - y1 + 1],
                    area=polygon_area(obj['polygon']),
                    # PIL fills pixel (i, j) when the point (i, j) is in
                    # the polygon; COCO's pixel (i, j) is the square
                    # [i, i + 1) x [j, j + 1): shift by half a pixel
                    segmentation=[[
                        round(c + 0.5, 2) for xy in obj['polygon'] for c in xy
                    ]],
                    iscrowd=0))
    ann_file = osp.join(root, 'annotations', f'instances_{split}2017.json')
    with open(ann_file, 'w') as f:
        json.dump(
            dict(
                images=images, annotations=annotations, categories=categories),
            f)
    return ann_file


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
    voc_root = osp.join(out_dir, 'VOCdevkit')
    write_voc_year(voc_root, '2007', dict(trainval=num_train, test=num_test),
                   rng, size, max_objects)
    write_voc_year(voc_root, '2012', dict(trainval=num_train), rng, size,
                   max_objects)
    coco_root = osp.join(out_dir, 'coco')
    train_ann = write_coco_split(coco_root, 'train', num_train, rng, size,
                                 max_objects, 1)
    val_ann = write_coco_split(coco_root, 'val', num_test, rng, size,
                               max_objects, 1 + num_train)
    return dict(
        voc_root=voc_root + os.sep,
        coco_root=coco_root + os.sep,
        coco_train_ann=train_ann,
        coco_val_ann=val_ann)
