# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCo v2 pretraining -> checkpoint -> detection fine-tuning -> metrics,
with the shipped configs, fine-tuned through mmdet's own tools/train.py (as
installed, what `mim train mmdet` runs) and tested through ours."""
import glob
import json
import os.path as osp
from typing import Dict, List

import pytest
import torch
from mmengine.config import Config
from mmengine.model import is_model_wrapper
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from mmengine.runner.checkpoint import _load_checkpoint

from mocoplug.engine.runner import MoCoRunner
from mocoplug.utils import fill_pretrained
from ..packaged_tools import run_packaged_tool
from .conftest import (COCO_C4, COCO_FPN, VOC_C4, dump, load_tool,
                       shrink_detection_cfg, sync_bn_to_bn)

TRAIN = load_tool('train')
TEST = load_tool('test')
# detector module -> prefix of its tensors in the MoCo checkpoint
C4_SOURCES = {'backbone.': 'backbone.', 'roi_head.shared_head.': 'backbone.'}
FPN_SOURCES = {'backbone.': 'backbone.'}


def _state(path: str) -> Dict[str, torch.Tensor]:
    return _load_checkpoint(path, map_location='cpu')['state_dict']


@pytest.fixture(scope='module')
def moco_state(mocov2_r50_checkpoint):
    state = _state(mocov2_r50_checkpoint)
    query = {k for k in state if k.startswith('backbone.')}
    # the fixture is a real MoCo checkpoint: ResNet-50 query encoder and a
    # key encoder that the momentum update moved away from it
    assert len(query) == 318
    differ = [
        k for k in query if state[k].is_floating_point()
        and not torch.equal(state[k], state['momentum_encoder.' + k])
    ]
    assert len(differ) == len(
        [k for k in query if state[k].is_floating_point()])
    return state


@pytest.fixture
def init_states(monkeypatch) -> List[Dict[str, torch.Tensor]]:
    """The model's state right after the Runner initialised its weights."""
    states = []
    original = Runner._init_model_weights

    def spy(self):
        original(self)
        model = self.model.module if is_model_wrapper(
            self.model) else self.model
        states.append({
            k: v.detach().clone()
            for k, v in model.state_dict().items()
        })

    monkeypatch.setattr(Runner, '_init_model_weights', spy)
    return states


def assert_query_encoder_loaded(state: Dict[str, torch.Tensor],
                                moco: Dict[str, torch.Tensor],
                                sources: Dict[str, str]) -> None:
    """Every tensor of the MoCo query encoder is in the detector exactly
    once, equal to the query encoder's and not to the key encoder's; the
    C4 extra norm (not in the checkpoint) is a fresh BN."""
    used = []
    for det_prefix, moco_prefix in sources.items():
        names = [k for k in state if k.startswith(det_prefix)]
        assert names, det_prefix
        for name in names:
            rest = name[len(det_prefix):]
            if rest.startswith('norm.'):  # ResLayerExtraNorm's own BN
                fresh = {
                    'weight': 1.,
                    'bias': 0.,
                    'running_mean': 0.,
                    'running_var': 1.,
                    'num_batches_tracked': 0
                }
                assert torch.all(state[name] == fresh[rest[5:]]), name
                continue
            key = moco_prefix + rest
            assert torch.equal(state[name], moco[key]), name
            if state[name].is_floating_point():
                assert not torch.equal(state[name],
                                       moco['momentum_encoder.' + key])
            used.append(key)
    assert sorted(used) == sorted(k for k in moco if k.startswith('backbone.'))


# what the R-CNN detectors call of the kernels mocoplug serves
RCNN_KERNELS = {'nms', 'roi_align_forward', 'roi_align_backward'}


def assert_kernels(calls, expected) -> None:
    """The served kernels called are ``expected`` (nothing to check where
    compiled mmcv ran its own)."""
    if calls is not None:
        assert set(calls) == expected, calls


def test_voc_faster_rcnn_c4_from_mocov2(tiny_det_data, mocov2_r50_checkpoint,
                                        moco_state, init_states, tmp_path,
                                        monkeypatch, served_kernel_calls):
    """mmdet's tools/train.py builds the config's runner (runner_type),
    which gives `pretrained=` to the backbone and the res5 head; the mmcv
    kernels it needs are the ones torchvision serves."""
    cfg = shrink_detection_cfg(
        Config.fromfile(VOC_C4), tiny_det_data, str(tmp_path))
    path = dump(cfg, str(tmp_path / 'voc.py'))
    runners = run_packaged_tool(
        monkeypatch, 'mmdet', 'train',
        [path, '--cfg-options', f'pretrained={mocov2_r50_checkpoint}'])
    assert [type(r) for r in runners] == [MoCoRunner]
    runner = runners[0]

    assert len(init_states) == 1
    assert_query_encoder_loaded(init_states[0], moco_state, C4_SOURCES)
    # it trained (a warm-up lr is tiny but not zero)
    final = runner.model.state_dict()
    assert not torch.equal(final['backbone.conv1.weight'],
                           init_states[0]['backbone.conv1.weight'])

    # the val loop at the end: VOC AP50, AP75 and AP (mean over IoUs)
    hub = runner.message_hub
    thresholds = [
        hub.get_scalar(f'val/pascal_voc/AP{t}').current()
        for t in range(50, 100, 5)
    ]
    ap = hub.get_scalar('val/pascal_voc/mAP').current()
    assert all(0. <= v <= 1. for v in thresholds)
    # mmdet logs each AP_t rounded to 3 decimals and mAP unrounded: they
    # differ by at most the mean rounding, 5e-4
    assert ap == pytest.approx(sum(thresholds) / 10, abs=1e-3)

    # precise BN ran before the checkpoint was written: the checkpoint has
    # the statistics the model was evaluated with
    saved = _state(str(tmp_path / 'iter_2.pth'))
    for name in ('roi_head.shared_head.norm.running_var',
                 'backbone.layer3.5.bn3.running_mean'):
        assert torch.equal(saved[name], final[name]), name
    assert not torch.equal(final['roi_head.shared_head.norm.running_var'],
                           torch.ones(2048))
    with open(glob.glob(str(tmp_path / '*' / '*.log'))[0]) as f:
        log = f.read()
    # the loading report of both initialisers, and precise BN
    assert "ResNet loaded 258/258 tensors" in log
    assert 'ResLayerExtraNorm loaded 60/65 tensors' in log
    assert 'kept their init (keep_init): norm.* (5)' in log
    # on one process, 2 images a step: the 8 x 2 recipe's rules, before
    # the first step; mocoplug's hooks on mmdet's runtime
    recipe = log.index('this config is a recipe for 16 images an optimizer '
                       'step (auto_scale_lr.base_batch_size) and this run '
                       'takes 2 (1 process x batch 2); the lr stays 0.02')
    assert recipe < log.index('Saving checkpoint at 2 iterations')
    for rule in ('lr x 0.125: pass --auto-scale-lr',
                 'train_cfg.max_iters and the lr milestones x 8'):
        assert rule in log[recipe:recipe + 900], rule
    assert {'MoCoConfigCheckHook',
            'NonFiniteLossHook'} <= {type(h).__name__
                                     for h in runner.hooks}
    assert 'BN statistics recomputed over 1 training batches' in log
    assert_kernels(served_kernel_calls, RCNN_KERNELS)


def test_coco_mask_rcnn_fpn_from_mocov2(tiny_det_data, mocov2_r50_checkpoint,
                                        moco_state, init_states, tmp_path,
                                        monkeypatch, served_kernel_calls):
    cfg = shrink_detection_cfg(
        Config.fromfile(COCO_FPN), tiny_det_data, str(tmp_path))
    path = dump(cfg, str(tmp_path / 'coco.py'))
    # mmdet's tool has no --no-validate: the same through --cfg-options
    runners = run_packaged_tool(monkeypatch, 'mmdet', 'train', [
        path, '--cfg-options', f'pretrained={mocov2_r50_checkpoint}',
        'val_cfg=None', 'val_dataloader=None', 'val_evaluator=None'
    ])
    assert [type(r) for r in runners] == [MoCoRunner]
    assert len(init_states) == 1
    assert_query_encoder_loaded(init_states[0], moco_state, FPN_SOURCES)

    out = str(tmp_path / 'metrics.json')
    metrics = TEST.main([path, str(tmp_path / 'epoch_1.pth'), '--out', out])
    with open(out) as f:
        assert json.load(f) == pytest.approx(metrics)
    for kind in ('bbox', 'segm'):
        for key in ('mAP', 'mAP_50', 'mAP_75', 'mAP_s', 'mAP_m'):
            assert 0. <= metrics[f'coco/{kind}_{key}'] <= 1., key
        # no ground-truth object is large in the 96 x 64 images
        assert metrics[f'coco/{kind}_mAP_l'] == -1.
    assert not init_states[1:]  # testing does not re-initialise
    assert_kernels(served_kernel_calls, RCNN_KERNELS)


def test_coco_mask_rcnn_c4_trains_and_tests(tiny_det_data,
                                            mocov2_r50_checkpoint, tmp_path,
                                            served_kernel_calls):
    """Mask R-CNN C4 through our tools: training (RoIAlign forward and
    backward, mask targets, nms), then testing with masks, on the kernels
    torchvision serves."""
    cfg = shrink_detection_cfg(
        Config.fromfile(COCO_C4), tiny_det_data, str(tmp_path))
    # the res5 head runs per RoI: 32 instead of 512 (train) and 1000 (test)
    cfg.model.train_cfg.rcnn.sampler.num = 32
    cfg.model.test_cfg.rpn.max_per_img = 32
    path = dump(cfg, str(tmp_path / 'coco_c4.py'))
    TRAIN.main([
        path, '--cfg-options', f'pretrained={mocov2_r50_checkpoint}',
        'val_cfg=None', 'val_dataloader=None', 'val_evaluator=None'
    ])
    assert_kernels(served_kernel_calls, RCNN_KERNELS)
    if served_kernel_calls is not None:
        served_kernel_calls.clear()
    metrics = TEST.main([path, str(tmp_path / 'epoch_1.pth')])
    for kind in ('bbox', 'segm'):
        assert 0. <= metrics[f'coco/{kind}_mAP_50'] <= 1.
    # testing runs RoIAlign and nms, never a backward
    assert_kernels(served_kernel_calls, {'nms', 'roi_align_forward'})


@pytest.mark.parametrize('layout', ['mocoplug', 'official'])
def test_coco_mask_rcnn_c4_init(tiny_det_data, mocov2_r50_checkpoint,
                                moco_state, layout, tmp_path):
    """Mask R-CNN C4: backbone and res5 head from the query encoder, right
    after init_weights (mmdet's own init of ResNet/ResLayer is replaced by
    mocoplug's 'Pretrained', applied after the children's own init); the
    official layout (module.encoder_q.*) through the config's prefix
    'backbone.' too, its key encoder never read."""
    from mmdet.registry import MODELS

    cfg = sync_bn_to_bn(Config.fromfile(COCO_C4))
    cfg.pretrained = mocov2_r50_checkpoint
    if layout == 'official':
        cfg.pretrained = str(tmp_path / 'moco_v2_200ep_pretrain.pth.tar')
        official = {}
        for key, value in moco_state.items():
            if key.startswith('backbone.'):
                official['module.encoder_q.' + key[9:]] = value
            elif key.startswith('momentum_encoder.backbone.'):
                official['module.encoder_k.' + key[26:]] = value
        torch.save(dict(state_dict=official), cfg.pretrained)
    assert fill_pretrained(cfg) == 2
    init_default_scope('mmdet')
    model = MODELS.build(cfg.model)
    model.init_weights()
    assert_query_encoder_loaded(model.state_dict(), moco_state, C4_SOURCES)


@pytest.mark.parametrize('case', ['resnet18', 'not-given'])
def test_bad_pretrained_stops_training_with_a_clear_error(
        case, tiny_det_data, tmp_path):
    cfg = shrink_detection_cfg(
        Config.fromfile(VOC_C4), tiny_det_data, str(tmp_path))
    path = dump(cfg, str(tmp_path / 'voc.py'))
    if case == 'resnet18':
        # a MoCo ResNet-18: the stem and BN layers of equal width would
        # load, the rest stay random (mmengine's loader)
        from mmpretrain.models import ResNet
        bad = str(tmp_path / 'moco_r18.pth')
        torch.save(
            dict(
                state_dict={
                    f'backbone.{k}': v
                    for k, v in ResNet(depth=18).state_dict().items()
                }), bad)
        argv = [path, '--cfg-options', f'pretrained={bad}']
        match = (r'init_cfg of ResNet.*no known key layout gives all .* '
                 r'tensors.*mocoplug / mmpretrain / mmselfsup \(backbone\.\)'
                 r': \d+/\d+')
    else:
        argv = [path]
        match = 'pretrained=PATH'
    with pytest.raises(ValueError, match=match):
        TRAIN.main(argv)
    assert not osp.exists(tmp_path / 'iter_1.pth')
