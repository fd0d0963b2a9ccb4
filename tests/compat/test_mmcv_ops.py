# Copyright (c) mocoplug contributors. All rights reserved.
"""The mmcv kernels that torchvision serves, against float64 references
written from their definitions and, where a compiled mmcv is installed,
against it (the report header says which ran)."""
import importlib
import math
import subprocess
import sys
from typing import Optional

import pytest
import torch

from mocoplug.compat import mmcv_ops
from mocoplug.compat.mmcv_ops import (MMCVOpNotServedError, MMCVOpsDeviceError,
                                      ServedOps)

# float64 rounding, 1.1e-16 per operation, over the at most a few hundred
# products and sums behind one output (inputs of magnitude <= 4): < 1e-12
F64_ATOL = 1e-12


def compiled_mmcv() -> Optional[object]:
    """The compiled ``mmcv._ext``, or None where mocoplug serves it."""
    ext = importlib.import_module('mmcv._ext')
    return None if isinstance(ext, ServedOps) else ext


def bilinear(feat: torch.Tensor, y: float, x: float) -> torch.Tensor:
    """Bilinear interpolation of ``feat`` (C, H, W) at (y, x) with the
    border rule of Detectron's RoIAlign: zero outside [-1, H] x [-1, W],
    clamped to the last row/column inside."""
    _, h, w = feat.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return feat.new_zeros(feat.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * feat[:, y0, x0] +
            (1 - ly) * lx * feat[:, y0, x1] + ly * (1 - lx) * feat[:, y1, x0] +
            ly * lx * feat[:, y1, x1])


def roi_align_reference(feat, rois, out_h, out_w, scale, sampling_ratio,
                        aligned):
    """RoIAlign (Mask R-CNN, He et al. 2017, Sec. 3; Detectron's kernel):
    each of the out_h x out_w bins of a RoI averages the bilinear values at
    a regular grid of sampling points (ceil(bin size) per side when
    ``sampling_ratio`` is 0); ``aligned`` shifts the RoI by half a pixel,
    otherwise a RoI is at least 1 x 1."""
    out = []
    shift = 0.5 if aligned else 0.0
    for b, x1, y1, x2, y2 in rois.tolist():
        sx, sy = x1 * scale - shift, y1 * scale - shift
        rw, rh = x2 * scale - shift - sx, y2 * scale - shift - sy
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / out_h, rw / out_w
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(bh)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(bw)
        bins = []
        for ph in range(out_h):
            for pw in range(out_w):
                ys = [sy + ph * bh + (i + 0.5) * bh / gh for i in range(gh)]
                xs = [sx + pw * bw + (i + 0.5) * bw / gw for i in range(gw)]
                samples = [
                    bilinear(feat[int(b)], y, x) for y in ys for x in xs
                ]
                bins.append(sum(samples) / max(gh * gw, 1))
        bins = torch.stack(bins, 1)
        out.append(bins.reshape(-1, out_h, out_w))
    return torch.stack(out)


def random_rois(n: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """RoIs (batch index, x1, y1, x2, y2) in an image of size x size,
    some reaching over its border, some smaller than a pixel."""
    xy = torch.rand(n, 2, generator=gen, dtype=torch.float64) * size
    wh = torch.rand(n, 2, generator=gen, dtype=torch.float64) * size * 0.8
    wh[:2] *= 0.05
    xy[-1] -= 3.0
    idx = torch.randint(0, 2, (n, 1), generator=gen).double()
    return torch.cat([idx, xy, xy + wh], 1)


def served_roi_align(feat, rois, out_size, scale, ratio, aligned, ext=None):
    ext = ext or ServedOps()
    out = feat.new_zeros(len(rois), feat.shape[1], *out_size)
    empty = feat.new_zeros(0)
    ext.roi_align_forward(feat, rois, out, empty, empty, *out_size, scale,
                          ratio, 1, aligned)
    return out


@pytest.mark.parametrize('aligned', [True, False])
@pytest.mark.parametrize('ratio', [0, 2])
def test_roi_align_is_the_definition(device, aligned, ratio):
    gen = torch.Generator().manual_seed(ratio + aligned)
    feat = torch.rand(2, 3, 12, 10, generator=gen, dtype=torch.float64) * 4
    rois = random_rois(7, 40, gen)
    expected = roi_align_reference(feat, rois, 3, 2, 0.25, ratio, aligned)
    out = served_roi_align(
        feat.to(device), rois.to(device), (3, 2), 0.25, ratio, aligned)
    assert out.device.type == device
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=F64_ATOL)


@pytest.mark.parametrize('aligned', [True, False])
def test_roi_align_gradient_through_mmcv(device, aligned, monkeypatch):
    """mmcv's RoIAlign (its Python function, our kernels): the gradient is
    the finite-difference one (RoIAlign is linear in its input, so
    gradcheck's differences are exact up to round-off) and the one of the
    float64 definition."""
    roi_align_module = sys.modules['mmcv.ops.roi_align']
    monkeypatch.setattr(roi_align_module, 'ext_module', ServedOps())
    gen = torch.Generator().manual_seed(3)
    feat = torch.rand(2, 2, 6, 5, generator=gen, dtype=torch.float64)
    rois = random_rois(4, 24, gen)
    feat_d = feat.clone().to(device).requires_grad_()

    def fn(x):
        return roi_align_module.roi_align(x, rois.to(device), (2, 3), 0.25, 0,
                                          'avg', aligned)

    assert torch.autograd.gradcheck(fn, (feat_d, ))
    weights = torch.rand(4, 2, 2, 3, generator=gen, dtype=torch.float64)
    (fn(feat_d) * weights.to(device)).sum().backward()
    ref = feat.clone().requires_grad_()
    (roi_align_reference(ref, rois, 2, 3, 0.25, 0, aligned) *
     weights).sum().backward()
    torch.testing.assert_close(
        feat_d.grad.cpu(), ref.grad, rtol=0, atol=F64_ATOL)


def iou(a, b, offset):
    w = max(min(a[2], b[2]) - max(a[0], b[0]) + offset, 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]) + offset, 0.0)
    inter = w * h

    def area(r):
        return (r[2] - r[0] + offset) * (r[3] - r[1] + offset)

    return inter / (area(a) + area(b) - inter)


def nms_reference(boxes, scores, threshold, offset):
    """Greedy NMS: by decreasing score, keep a box unless its IoU with a
    kept box exceeds the threshold (sides x2 - x1 + offset)."""
    keep = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if all(iou(boxes[i], boxes[k], offset) <= threshold for k in keep):
            keep.append(i)
    return keep


def random_boxes(n: int, gen: torch.Generator):
    xy = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 25
    wh = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 20 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(
        n, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize('offset', [0, 1])
@pytest.mark.parametrize('threshold', [0.3, 0.7])
def test_nms_is_greedy_suppression(device, offset, threshold):
    gen = torch.Generator().manual_seed(offset * 10 + int(threshold * 10))
    boxes, scores = random_boxes(300, gen)
    expected = nms_reference(boxes.tolist(), scores.tolist(), threshold,
                             offset)
    kept = ServedOps().nms(
        boxes.to(device), scores.to(device), threshold, offset)
    assert kept.device.type == device and kept.dtype == torch.int64
    assert kept.tolist() == expected
    assert 10 < len(expected) < 300  # suppression did something


def test_mmcv_batched_nms_runs_on_the_served_kernel(monkeypatch):
    """mmcv's batched_nms (what the RPN and the box head call): classes
    kept apart, each by greedy NMS."""
    import mmcv.ops
    monkeypatch.setattr(sys.modules['mmcv.ops.nms'], 'ext_module', ServedOps())
    gen = torch.Generator().manual_seed(5)
    boxes, scores = random_boxes(120, gen)
    labels = torch.randint(0, 3, (120, ), generator=gen)
    dets, kept = mmcv.ops.batched_nms(boxes.float(), scores.float(), labels,
                                      dict(type='nms', iou_threshold=0.5))
    expected = []
    for c in range(3):
        idx = torch.nonzero(labels == c)[:, 0].tolist()
        expected += [
            idx[i]
            for i in nms_reference([boxes[j].tolist() for j in idx],
                                   [scores[j].item() for j in idx], 0.5, 0)
        ]
    assert sorted(kept.tolist()) == sorted(expected)
    assert torch.equal(dets[:, 4], scores.float()[kept])


@pytest.mark.skipif(
    compiled_mmcv() is None,
    reason='compiled mmcv not installed (mmcv-lite): the served kernels '
    'were compared against the float64 definitions only')
def test_served_kernels_equal_compiled_mmcv():
    """float32, as detectors run them: the same arithmetic as mmcv's CPU
    kernels, hence the same bits."""
    ext = compiled_mmcv()
    gen = torch.Generator().manual_seed(0)
    feat = torch.rand(2, 8, 20, 17, generator=gen)
    rois = random_rois(30, 70, gen).float()
    for ratio in (0, 2):
        for aligned in (True, False):
            args = (feat, rois, (7, 7), 0.25, ratio, aligned)
            ours = served_roi_align(*args)
            theirs = served_roi_align(*args, ext=ext)
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
            grad = torch.rand(ours.shape, generator=gen)
            empty = feat.new_zeros(0)
            g_ours, g_theirs = torch.zeros_like(feat), torch.zeros_like(feat)
            for e, g in ((ServedOps(), g_ours), (ext, g_theirs)):
                e.roi_align_backward(grad, rois, empty, empty, g, 7, 7, 0.25,
                                     ratio, 1, aligned)
            # the two scatter-add their terms in the same order
            torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=0)
    boxes, scores = random_boxes(500, gen)
    for offset in (0, 1):
        assert torch.equal(
            ServedOps().nms(boxes.float(), scores.float(), 0.5, offset),
            ext.nms(
                boxes.float(),
                scores.float(),
                iou_threshold=0.5,
                offset=offset))


def test_other_kernels_import_and_raise_when_called():
    served = ServedOps('no compiled mmcv')
    with pytest.raises(MMCVOpNotServedError) as info:
        served.deform_conv_forward(torch.zeros(1))
    for part in ('deform_conv_forward', 'make setup-full', 'FORCE_CUDA=1',
                 'no compiled mmcv'):
        assert part in str(info.value)
    empty = torch.zeros(0)
    with pytest.raises(MMCVOpNotServedError, match="pool_mode='max'"):
        served.roi_align_forward(empty, empty, empty, empty, empty, 1, 1, 1.0,
                                 0, 0, True)
    assert not hasattr(served, '__path__')  # dunders stay absent


def test_import_mocoplug_serves_the_ops_without_compiled_mmcv():
    """A ``None`` entry in sys.modules makes ``import mmcv._ext`` fail as
    under mmcv-lite; mmdet's two-stage detectors then import and their ops
    run."""
    script = ("import sys; sys.modules['mmcv._ext'] = None\n"
              'import torch, mocoplug\n'
              'from mmcv.ops import RoIAlign, nms, sigmoid_focal_loss\n'
              'import mmdet.models\n'
              "print(type(sys.modules['mmcv._ext']).__name__)\n"
              'x = torch.arange(16.).reshape(1, 1, 4, 4)\n'
              'r = torch.tensor([[0., 0., 0., 3., 3.]])\n'
              'print(RoIAlign(1, 1.0, 2)(x, r).item())\n')
    out = subprocess.run([sys.executable, '-c', script],
                         capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    # one bin over [-0.5, 2.5]^2 (aligned), 2 x 2 samples at 0.25 and 1.75
    # per side: the mean of x[y, x] = 4y + x over those points is 5 * 1
    assert out.stdout.split() == ['ServedOps', '5.0']


class _CPUOnlyExt:

    @staticmethod
    def get_compiling_cuda_version():
        return 'not available'


def test_compiled_mmcv_without_cuda_refuses_a_cuda_detector(monkeypatch):
    monkeypatch.setitem(sys.modules, 'mmcv._ext', _CPUOnlyExt())
    mmcv_ops.check_mmcv_ops_device(torch.device('cpu'))
    with pytest.raises(MMCVOpsDeviceError) as info:
        mmcv_ops.check_mmcv_ops_device(torch.device('cuda', 0))
    for fix in ('mmcv-lite', 'FORCE_CUDA=1', 'make setup-full'):
        assert fix in str(info.value)
    monkeypatch.setitem(sys.modules, 'mmcv._ext', ServedOps())
    mmcv_ops.check_mmcv_ops_device(torch.device('cuda', 0))


def test_uses_mmcv_ops():
    from mmcv.ops import RoIAlign
    assert mmcv_ops.uses_mmcv_ops(torch.nn.Sequential(RoIAlign(7)))
    assert not mmcv_ops.uses_mmcv_ops(torch.nn.Sequential(torch.nn.ReLU()))
