# Copyright (c) mocoplug contributors. All rights reserved.
"""Smoke test of the installed stack: mmcv's ops (compiled or served), the
OpenMMLab packages, and mmengine checkpoints under torch >= 2.6; and that
pretraining and evaluation import no mmcv op at all."""
import os
import subprocess
import sys
from importlib import metadata

import mmcv
import mmdet
import mmengine
import mmpretrain
import pytest
import torch

import mocoplug


def test_versions_are_the_tested_stack():
    assert mmcv.__version__ == '2.1.0'
    assert mmengine.__version__ == '0.10.7'
    assert mmpretrain.__version__ == '1.2.0'
    assert mmdet.__version__ == '3.3.0'
    assert mocoplug.__version__


def test_one_mmcv_distribution():
    """The set-up installs mmcv-lite or mmcv, never both: they write the
    same files under mmcv/, so both would leave a tree mixed from the
    two."""
    dists = []
    for name in ('mmcv', 'mmcv-lite'):
        try:
            dists.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            pass
    assert len(dists) == 1 and dists[0][1] == '2.1.0', dists


def test_pretraining_and_knn_run_without_mmcv_ops(tmp_path):
    """The demo's config trains and runs its kNN monitor in a process where
    mmcv's compiled ops cannot load, calling none of the kernels mocoplug
    serves in their place. mmcv-lite is mmcv's Python code without the
    extension module mmcv._ext (mmcv's op loader imports exactly that), so
    a None entry for it in sys.modules is mmcv-lite to every import."""
    config = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'configs',
        'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
    script = f"""
import math, sys
sys.modules['mmcv._ext'] = None
import mocoplug
from mocoplug.compat.mmcv_ops import SERVED, ServedOps
calls = []
for name in SERVED:
    def count(*args, n=name, **kwargs):
        calls.append(n)
    setattr(ServedOps, name, staticmethod(count))
from mmengine.config import Config
from mmengine.runner import Runner
cfg = Config.fromfile({config!r})
cfg.work_dir = {str(tmp_path)!r}
cfg.log_level = 'WARNING'
cfg.train_dataloader.dataset.indices = 16
cfg.train_dataloader.batch_size = 8
cfg.train_cfg.max_epochs = 1
knn = cfg.custom_hooks[1]
assert knn.type == 'KNNMonitorHook'
knn.topk = (5, )
for loader in (knn.memory_dataloader, knn.query_dataloader):
    loader.dataset.indices = 16
runner = Runner.from_cfg(cfg)
runner.train()
loss = runner.message_hub.get_scalar('train/loss').current()
assert math.isfinite(loss), loss
knn_hook, = [h for h in runner.hooks if type(h).__name__ == 'KNNMonitorHook']
assert list(knn_hook.last_metrics) == ['top1_k5'], knn_hook.last_metrics
assert 0 <= knn_hook.last_metrics['top1_k5'] <= 100
assert type(sys.modules['mmcv._ext']) is ServedOps and calls == [], calls
assert 'mocoplug.detection' not in sys.modules
print('ok')
"""
    out = subprocess.run([sys.executable, '-c', script],
                         capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith('ok')


def test_mmcv_nms_op():
    from mmcv.ops import nms
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.],
                          [20., 20., 30., 30.]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    dets, keep = nms(boxes, scores, iou_threshold=0.5)
    # box 1 overlaps box 0 with IoU 81/119 > 0.5 and is suppressed
    assert keep.tolist() == [0, 2]
    assert torch.allclose(dets[:, 4], torch.tensor([0.9, 0.7]))


def test_mmcv_roi_align_op():
    from mmcv.ops import RoIAlign

    # feature value = x coordinate, so bilinear sampling returns the mean x
    feat = torch.arange(16.).repeat(16, 1).view(1, 1, 16, 16)
    rois = torch.tensor([[0., 2., 2., 10., 10.]])  # (batch, x1, y1, x2, y2)
    out = RoIAlign((2, 2), spatial_scale=1., sampling_ratio=2,
                   aligned=True)(feat, rois)
    # aligned=True shifts by -0.5 px: the two bins cover x in [1.5, 5.5]
    # and [5.5, 9.5], whose centres are 3.5 and 7.5
    expected = torch.tensor([[3.5, 7.5], [3.5, 7.5]])
    assert torch.allclose(out[0, 0], expected, atol=1e-5)


def test_mmdet_models_import():
    from mmdet.models import FasterRCNN, MaskRCNN  # noqa: F401
    from mmpretrain.models import ResNet  # noqa: F401


def test_runner_checkpoint_round_trip(tmp_path, tiny_runner_cfg):
    """A checkpoint written by mmengine resumes under torch >= 2.6."""
    from mmengine.runner import Runner
    cfg = tiny_runner_cfg(tmp_path / 'first', max_iters=4)
    Runner.from_cfg(cfg).train()
    ckpt = tmp_path / 'first' / 'iter_4.pth'
    assert ckpt.exists()
    # plain torch.load refuses it (the bug this project fixes) ...
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(ckpt)
    # ... mmengine's loader, as installed by `import mocoplug`, does not
    cfg = tiny_runner_cfg(tmp_path / 'second', max_iters=6)
    cfg.resume = True
    cfg.load_from = str(ckpt)
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 6
    history = runner.message_hub.get_scalar('train/lr').data[0]
    assert len(history) == 6  # 4 resumed + 2 new entries
