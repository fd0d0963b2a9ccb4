# Copyright (c) mocoplug contributors. All rights reserved.
"""The detection demo: its scaled configs, and the whole pipeline at 2
iterations a run (scenes -> MoCo and supervised pretraining -> Faster and
Mask R-CNN from three inits -> table, JSON, figure)."""
import glob
import json
import os.path as osp
import re
import sys

import pytest

TOOLS = osp.join(osp.dirname(osp.dirname(osp.dirname(__file__))), 'tools')


def worker_init_as_the_suite() -> None:
    """The demo's worker set-up after the suite's (tests/conftest.py: no
    yapf layout of the configs each run logs and dumps)."""
    import demo_detection

    import tests.conftest  # noqa: F401
    demo_detection._worker_init()


@pytest.fixture
def demo(monkeypatch):
    # imported by name (not from a file path): the worker processes it
    # spawns import its functions the same way
    monkeypatch.syspath_prepend(TOOLS)
    monkeypatch.delitem(sys.modules, 'demo_detection', raising=False)
    import demo_detection
    monkeypatch.setattr(demo_detection, '_worker_init',
                        worker_init_as_the_suite)
    return demo_detection


def test_scaled_configs_change_only_the_stated_sizes(demo, tmp_path):
    from mmengine.config import Config
    shipped = Config.fromfile(demo.VOC_C4)
    cfg = demo.scaled_detection_cfg(
        demo.VOC_C4, 'root/', 'wd', 200, 16, split='val')
    assert cfg.train_dataloader.dataset.ann_file.endswith('train16.txt')
    assert cfg.test_dataloader.dataset.ann_file.endswith('Main/val.txt')
    assert cfg.train_dataloader.dataset.metainfo.classes == demo.CLASSES
    assert cfg.val_dataloader is None and cfg.val_cfg is None
    assert cfg.test_evaluator.iou_thrs == [0.5]
    m = cfg.model
    assert (m.backbone.depth, m.backbone.base_channels) == (18, 16)
    assert m.roi_head.bbox_head.num_classes == 10
    assert m.train_cfg.rcnn.sampler.num == 16
    assert cfg.optim_wrapper.optimizer.lr == 0.02 == \
        shipped.optim_wrapper.optimizer.lr
    assert [s.get('milestones') for s in cfg.param_scheduler
            ] == [None, [150,
                         183]]  # 18/24 and 22/24 of the iterations, as shipped
    # as shipped: the pretrained= plumbing, trained BN, every stage tuned
    for key in ('init_cfg', 'frozen_stages', 'norm_eval'):
        assert m.backbone[key] == shipped.model.backbone[key]
    assert m.backbone.norm_cfg.type == 'BN'  # SyncBN in one process
    coco = demo.scaled_detection_cfg(demo.COCO_C4, 'coco/', 'wd', 200, 64)
    assert coco.train_dataloader.dataset.indices == 64
    assert coco.test_evaluator.ann_file == \
        'coco/annotations/instances_test2017.json'
    assert coco.model.roi_head.mask_head.num_classes == 10

    moco = demo.moco_cfg('scenes', 'wd', 12)
    # the shipped MoCo v2 configs' init, not mmpretrain's zero-init default
    assert moco.model.backbone.zero_init_residual is False
    assert moco.model.queue.size == 512
    assert moco.train_dataloader.dataset.data_root == 'scenes'
    assert moco.param_scheduler[0].T_max == moco.train_cfg.max_epochs == 12
    supervised = demo.supervised_cfg('wd', 5)
    assert supervised.model.backbone == moco.model.backbone


def test_a_budget_above_the_unlabelled_scenes_is_refused(demo, capsys):
    with pytest.raises(SystemExit):
        demo.main(['--budgets', '32', '600', '--unlabelled', '512'])
    assert '--unlabelled >= that' in capsys.readouterr().err


def test_demo_pipeline_end_to_end(demo, tmp_path):
    seeds, budgets = [0], [4, 8]
    results = demo.main([
        '--work-dir',
        str(tmp_path), '--seeds', *map(str, seeds), '--budgets',
        *map(str, budgets), '--iters', '2', '--pretrain-epochs', '1',
        '--supervised-epochs', '1', '--unlabelled', '64', '--scenes', '4'
    ])  # 64 unlabelled scenes: one batch (16 'trained' 0 iterations)
    voc = 'Faster R-CNN C4 (VOC), {} labelled, AP50'
    coco = 'Mask R-CNN C4 (COCO), 8 labelled, {}_mAP'
    expected = {
        voc.format(4): {'random init', 'MoCo v2', 'supervised'},
        voc.format(8): {'random init', 'MoCo v2'},
        coco.format('bbox'): {'random init', 'MoCo v2'},
        coco.format('segm'): {'random init', 'MoCo v2'},
    }
    assert {k: set(v) for k, v in results.items()} == expected
    for per_init in results.values():
        for values in per_init.values():
            assert len(values) == len(seeds)
            assert all(0 <= v <= 1 for v in values)
    with open(tmp_path / 'results.json') as f:
        saved = json.load(f)
    assert saved['results'] == results and saved['split'] == 'test'
    assert osp.getsize(tmp_path / 'results.png') > 10000
    # the pretrained runs loaded their checkpoint (res2-4 into the backbone,
    # res5 into the RoI head; only the head's extra norm is new)
    for init in ('moco', 'supervised'):
        with open(tmp_path / 'voc4' / f'{init}-0' / 'run.log') as f:
            log = f.read()
        assert 'kept their init (keep_init): norm.* (5)' in log
        assert log.count('kept their init (keep_init)') == 1
        assert re.search(r'ResNet loaded (\d+)/\1 tensors', log)  # all
    with open(tmp_path / 'voc4' / 'random-0' / 'run.log') as f:
        assert 'Pretrained: ' not in f.read()
    # held-out digits only in the test scenes: 4 scenes, VOC and COCO
    assert len(glob.glob(str(tmp_path / 'data/coco/test2017/*.jpg'))) == 4
    with open(tmp_path / 'data/VOCdevkit/VOC2007/ImageSets/Main/test.txt') \
            as f:
        assert len(f.read().split()) == 4
