# Copyright (c) mocoplug contributors. All rights reserved.
"""Detection on the bands and bits MoCo was pretrained on: 4-band 16-bit
TIFFs of the tiny COCO scenes, a 4-band ResNet-50 MoCo checkpoint, the
snippet of docs/user_guides/detection_transfer.md ("Bands and bit depth",
Faster R-CNN FPN) and the shipped Mask R-CNN C4 with the page's
--cfg-options, trained and tested through mmdet's own tools."""
import glob
import json
import os
import os.path as osp
import re
import shutil

import numpy as np
import pytest
import torch
from mmengine.config import Config
from PIL import Image

from mocoplug.registry import MODELS
from ..packaged_tools import run_packaged_tool
from .conftest import (COCO_C4, MOCOV2, ROOT, dump, load_tool,
                       restored_default_scope, shrink_detection_cfg,
                       sync_bn_to_bn, unique_name)

PAGE = osp.join(ROOT, 'docs', 'user_guides', 'detection_transfer.md')


def page_snippets():
    """The page's two configs and the N-band --cfg-options."""
    with open(PAGE) as f:
        text = f.read()
    blocks = {
        name:
        re.search(r'```python\n(# ' + re.escape(name) + r'.*?)```', text,
                  re.S).group(1)
        for name in ('my_faster-rcnn_r50_fpn_moco_mydata.py',
                     'my_faster-rcnn_r50_fpn_moco_mybands.py')
    }
    options = re.search(
        r'```bash\n# N bands on a shipped COCO config.*?\n--cfg-options'
        r'(.*?)```', text, re.S).group(1)
    return blocks, options.replace('\\\n', ' ').split()


@pytest.fixture(scope='module')
def band_coco(tiny_det_data, tmp_path_factory):
    """The tiny COCO scenes as 4-band uint16 TIFFs: R, G, B x
    257 and a 4th band (the inverted grey x 257), ``file_name`` renamed."""
    import tifffile
    root = str(tmp_path_factory.mktemp('band_coco')) + '/'
    source = tiny_det_data['coco_root']
    shutil.copytree(source + 'annotations', root + 'annotations')
    for split in ('train2017', 'val2017'):
        os.makedirs(root + split)
        for path in glob.glob(f'{source}{split}/*.jpg'):
            rgb = np.asarray(Image.open(path).convert('RGB'), np.uint16)
            grey = 255 - rgb.mean(2, keepdims=True).astype(np.uint16)
            tifffile.imwrite(
                root + split + '/' + osp.basename(path)[:-4] + '.tif',
                np.dstack([rgb, grey]) * 257,
                photometric='rgb',
                extrasamples=['unspecified'])
        ann = f'{root}annotations/instances_{split}.json'
        with open(ann) as f:
            data = json.load(f)
        for image in data['images']:
            image['file_name'] = image['file_name'][:-4] + '.tif'
        with open(ann, 'w') as f:
            json.dump(data, f)
    mean, std, kind = load_tool('analysis_tools/band_stats').band_stats(
        sorted(glob.glob(root + 'train2017/*.tif')))
    assert kind == (4, 'uint16')
    return dict(root=root, mean=mean.tolist(), std=std.tolist())


@pytest.fixture(scope='module')
def band_moco_checkpoint(mocov2_r50_checkpoint, tmp_path_factory):
    """A MoCo v2 ResNet-50 of 4 bands: the RGB MoCo checkpoint through
    ``encoders_from`` (its stem by the adapt_input_conv rule)."""
    cfg = Config.fromfile(MOCOV2)
    cfg.model.backbone.in_channels = 4
    cfg.model.encoders_from = mocov2_r50_checkpoint
    cfg.model.shuffle_bn = 'none'
    model = MODELS.build(cfg.model)
    model.init_weights()
    path = str(tmp_path_factory.mktemp('band_moco') / 'mocov2_r50_4band.pth')
    torch.save(dict(state_dict=model.state_dict(), meta={}), path)
    return path


def band_statistics(cfg: Config, stats: dict) -> None:
    """The folder's mean and std in place of the page's examples."""
    cfg.model.data_preprocessor.update(mean=stats['mean'], std=stats['std'])


def spy_inputs(monkeypatch):
    """The batches BandDetDataPreprocessor receives, each checked against
    its output: every band normalised by its own mean and std."""
    from mocoplug.detection import BandDetDataPreprocessor
    seen, original = [], BandDetDataPreprocessor.forward

    def forward(self, data, training=False):
        inputs = [x.clone() for x in data['inputs']]
        out = original(self, data, training)
        for x, y in zip(inputs, out['inputs']):
            mean, std = self.mean.cpu(), self.std.cpu()
            assert mean.numel() == 4 and len(set(mean.flatten().tolist())) > 1
            want = (x.float() - mean) / std
            torch.testing.assert_close(y[:, :x.shape[1], :x.shape[2]], want)
        seen.extend(inputs)
        return out

    monkeypatch.setattr(BandDetDataPreprocessor, 'forward', forward)
    return seen


def assert_every_band_and_bit(seen):
    assert seen and all(x.shape[0] == 4 for x in seen)
    assert max(x.float().max().item() for x in seen) > 255  # not cut to 8
    assert all(x.dtype == torch.uint16 for x in seen)


def test_the_pages_fpn_config_trains_and_tests_on_4_bands(
        band_coco, band_moco_checkpoint, tmp_path, monkeypatch):
    blocks, _ = page_snippets()
    for name, text in blocks.items():
        (tmp_path / name).write_text(text)
    backbone = str(tmp_path / 'r50_mocov2_4band.pth')
    load_tool('model_converters/extract_backbone').main(
        [band_moco_checkpoint, backbone, '--format', 'torchvision'])
    cfg = sync_bn_to_bn(
        Config.fromfile(
            str(tmp_path / 'my_faster-rcnn_r50_fpn_moco_mybands.py')))
    band_statistics(cfg, band_coco)
    cfg.model.backbone.init_cfg.checkpoint = backbone
    cfg.model.roi_head.bbox_head.num_classes = 3
    cfg.model.test_cfg.rpn.max_per_img = 100
    cfg.model.test_cfg.rcnn.score_thr = 0.0
    metainfo = dict(classes=('tv', 'sheep', 'boat'))
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg[key]
        loader.update(batch_size=2, num_workers=0, persistent_workers=False)
        loader.dataset.update(data_root=band_coco['root'], metainfo=metainfo)
        for step in loader.dataset.pipeline:
            if step.type == 'Resize':
                step.scale = (128, 96)
    for key in ('val_evaluator', 'test_evaluator'):
        cfg[key].ann_file = (
            band_coco['root'] + 'annotations/instances_val2017.json')
    cfg.train_cfg.max_epochs = 1
    cfg.experiment_name = unique_name('band_fpn')
    path = dump(cfg, str(tmp_path / 'band_fpn.py'))
    work_dir = str(tmp_path / 'work')
    seen = spy_inputs(monkeypatch)
    with restored_default_scope():
        run_packaged_tool(monkeypatch, 'mmdet', 'train',
                          [path, '--work-dir', work_dir])
    assert_every_band_and_bit(seen)
    trained = torch.load(
        osp.join(work_dir, 'epoch_1.pth'),
        map_location='cpu',
        weights_only=False)['state_dict']['backbone.conv1.weight']
    start = torch.load(backbone, map_location='cpu')['conv1.weight']
    assert trained.shape == start.shape == (64, 4, 7, 7)
    assert (trained - start).abs().max() < 0.05  # trained from it
    seen.clear()
    with restored_default_scope():
        run_packaged_tool(
            monkeypatch, 'mmdet', 'test',
            [path,
             osp.join(work_dir, 'epoch_1.pth'), '--work-dir', work_dir])
    assert_every_band_and_bit(seen)
    logs = glob.glob(osp.join(work_dir, '*', '*.log'))
    assert any('coco/bbox_mAP:' in open(log).read() for log in logs)


def test_the_shipped_c4_config_trains_and_tests_on_4_bands(
        tiny_det_data, band_coco, band_moco_checkpoint, tmp_path, monkeypatch):
    _, options = page_snippets()
    data = dict(tiny_det_data, coco_root=band_coco['root'])
    cfg = shrink_detection_cfg(Config.fromfile(COCO_C4), data, str(tmp_path))
    cfg.model.train_cfg.rcnn.sampler.num = 32
    cfg.model.test_cfg.rpn.max_per_img = 32
    (tmp_path / 'config').mkdir()  # not in the work dir (the runner's copy)
    path = dump(cfg, str(tmp_path / 'config' / 'band_c4.py'))
    # the page's options as given, then the folder's own statistics
    options += [
        'model.data_preprocessor.mean=[' +
        ','.join(map(str, band_coco['mean'])) + ']',
        'model.data_preprocessor.std=[' +
        ','.join(map(str, band_coco['std'])) + ']'
    ]
    seen = spy_inputs(monkeypatch)
    with restored_default_scope():
        run_packaged_tool(monkeypatch, 'mmdet', 'train', [
            path, '--cfg-options', f'pretrained={band_moco_checkpoint}',
            'val_cfg=None', 'val_dataloader=None', 'val_evaluator=None',
            *(o for o in options if not o.startswith('val_'))
        ])
    assert_every_band_and_bit(seen)
    with open(glob.glob(str(tmp_path / '*' / '*.log'))[0]) as f:
        assert 'ResNet loaded 258/258 tensors' in f.read()
    seen.clear()
    with restored_default_scope():
        run_packaged_tool(
            monkeypatch, 'mmdet', 'test',
            [path,
             str(tmp_path / 'epoch_1.pth'), '--cfg-options', *options])
    assert_every_band_and_bit(seen)
