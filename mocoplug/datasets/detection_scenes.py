# Copyright (c) mocoplug contributors. All rights reserved.
"""Write scenes (an HWC uint8 image and objects with ``name``, inclusive
0-based ``bbox`` and ``polygon`` or ``mask``) as VOC and COCO datasets."""
import json
import os
import os.path as osp
from typing import List, Optional, Sequence, Tuple
from xml.etree import ElementTree as ET

import numpy as np
from PIL import Image

Scene = Tuple[np.ndarray, List[dict]]


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
        ET.SubElement(node, 'name').text = obj['name']
        ET.SubElement(node, 'pose').text = 'Unspecified'
        ET.SubElement(node, 'truncated').text = '0'
        ET.SubElement(node, 'difficult').text = str(obj.get('difficult', 0))
        box = ET.SubElement(node, 'bndbox')
        for tag, value in zip(('xmin', 'ymin', 'xmax', 'ymax'), obj['bbox']):
            ET.SubElement(box, tag).text = str(value + 1)
    ET.indent(root)
    return ET.ElementTree(root)


def write_voc_split(root: str, year: str, split: str,
                    scenes: List[Scene]) -> List[str]:
    """Write ``scenes`` as image set ``split`` of ``root/VOC{year}``;
    returns the image ids, ``{year}_{split}_{index:04d}``."""
    base = osp.join(root, f'VOC{year}')
    for sub in ('Annotations', 'JPEGImages', osp.join('ImageSets', 'Main')):
        os.makedirs(osp.join(base, sub), exist_ok=True)
    ids = [f'{year}_{split}_{i:04d}' for i in range(len(scenes))]
    for img_id, (img, objects) in zip(ids, scenes):
        name = f'{img_id}.jpg'
        Image.fromarray(img).save(
            osp.join(base, 'JPEGImages', name), quality=95)
        _voc_xml(name, (img.shape[1], img.shape[0]), objects).write(
            osp.join(base, 'Annotations', f'{img_id}.xml'))
    with open(osp.join(base, 'ImageSets', 'Main', f'{split}.txt'), 'w') as f:
        f.write(''.join(f'{i}\n' for i in ids))
    return ids


def _segmentation(obj: dict) -> Tuple[object, float]:
    """COCO ``segmentation`` and ``area`` of an object."""
    if 'polygon' in obj:
        xs, ys = np.array(obj['polygon'], dtype=float).T
        area = abs(np.dot(xs, np.roll(ys, -1)) - np.dot(ys, np.roll(xs, -1)))
        return [[round(c + 0.5, 2) for xy in obj['polygon']
                 for c in xy]], float(area / 2)  # shoelace formula
    from pycocotools import mask as mask_utils
    rle = mask_utils.encode(np.asfortranarray(obj['mask'].astype(np.uint8)))
    rle['counts'] = rle['counts'].decode()  # {'size': ..., 'counts': ...}
    return rle, float(obj['mask'].sum())


def write_coco_split(root: str,
                     split: str,
                     scenes: List[Scene],
                     class_names: Sequence[str],
                     first_image_id: int = 1) -> str:
    """Write ``scenes`` as ``root/{split}2017/`` and its instances json
    (category ids 1, 2, ... by ``class_names``); returns the json's path."""
    img_dir = osp.join(root, f'{split}2017')
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    names = enumerate(class_names, 1)
    categories = [dict(id=i, name=n, supercategory='object') for i, n in names]
    cat_ids = {c['name']: c['id'] for c in categories}
    images, annotations = [], []
    for image_id, (img, objects) in enumerate(scenes, first_image_id):
        name, (h, w) = f'{image_id:012d}.jpg', img.shape[:2]
        Image.fromarray(img).save(osp.join(img_dir, name), quality=95)
        images.append(dict(id=image_id, file_name=name, width=w, height=h))
        for obj in objects:
            x1, y1, x2, y2 = obj['bbox']
            segmentation, area = _segmentation(obj)
            annotations.append(
                dict(
                    id=len(annotations) + 1,
                    image_id=image_id,
                    category_id=cat_ids[obj['name']],
                    bbox=[x1, y1, x2 - x1 + 1, y2 - y1 + 1],
                    area=area,
                    segmentation=segmentation,
                    iscrowd=0))
    coco = dict(images=images, annotations=annotations, categories=categories)
    ann_file = osp.join(root, 'annotations', f'instances_{split}2017.json')
    with open(ann_file, 'w') as f:
        json.dump(coco, f)
    return ann_file


def digit_scenes(split: str,
                 num: int,
                 seed: int,
                 size: int = 64,
                 digit_sizes: Tuple[int, int] = (16, 32),
                 max_objects: int = 3,
                 threshold: int = 64,
                 indices: Optional[np.ndarray] = None) -> List[Scene]:
    """``num`` scenes of 1 to ``max_objects`` non-overlapping digits of
    :class:`DigitsDataset`'s ``split`` (or its ``indices``) on black; each
    object has ``digit`` (its index) and a mask of pixels > ``threshold``."""
    from .digits import DigitsDataset
    digits = DigitsDataset(split=split, img_size=8)
    pool = np.arange(len(digits)) if indices is None else np.asarray(indices)
    rng, scenes = np.random.RandomState(seed), []
    for _ in range(num):
        img = np.zeros((size, size), np.uint8)
        objects, boxes = [], []
        for _ in range(int(rng.randint(1, max_objects + 1))):
            side = int(rng.randint(digit_sizes[0], digit_sizes[1] + 1))
            for _attempt in range(50):
                x, y = rng.randint(0, size - side + 1, size=2)
                box = (x, y, x + side - 1, y + side - 1)
                if not any(box[0] <= b[2] + 1 and b[0] <= box[2] +
                           1 and box[1] <= b[3] + 1 and b[1] <= box[3] + 1
                           for b in boxes):
                    break
            else:
                continue
            info = digits.get_data_info(int(rng.choice(pool)))
            glyph = Image.fromarray(info['img'][..., 0])
            patch = np.asarray(glyph.resize((side, side), Image.BILINEAR))
            mask = np.zeros((size, size), bool)
            mask[y:y + side, x:x + side] = patch > threshold
            img[y:y + side, x:x + side] = patch
            ys, xs = np.nonzero(mask)
            bbox = [int(v) for v in (xs.min(), ys.min(), xs.max(), ys.max())]
            boxes.append(box)
            name, digit = str(info['gt_label']), info['digits_index']
            objects.append(dict(name=name, digit=digit, bbox=bbox, mask=mask))
        scenes.append((np.repeat(img[..., None], 3, axis=2), objects))
    return scenes
