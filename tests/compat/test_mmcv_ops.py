# Copyright (c) mocoplug contributors. All rights reserved.
"""The mmcv kernels that torchvision serves, against float64 references
written from their definitions and, where a compiled mmcv is installed,
against it (the report header says which ran)."""
import functools
import importlib
import math
import os
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
def test_served_kernels_equal_compiled_mmcv(monkeypatch):
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
    # deformable convolution v1/v2: both im2col + matrix product, in other
    # orders; float32 sums of <= 36 products of magnitude <= 2 (outputs
    # <= 72), ~6e-8 relative per operation: within 1e-5 x 72
    for modulated in (False, True):
        for case in DCN_CASES:
            inputs = [
                t if t is None else t.float()
                for t in deform_inputs(case, modulated, gen)
            ]
            grad = None
            results = []
            for e in (ServedOps(), ext):
                for name in ('deform_conv', 'modulated_deform_conv'):
                    monkeypatch.setattr(sys.modules[f'mmcv.ops.{name}'],
                                        'ext_module', e)
                leaves = [
                    t if t is None else t.clone().requires_grad_()
                    for t in inputs
                ]
                out = mmcv_deform_conv(*leaves, case)
                grad = torch.rand(out.shape, generator=gen) if grad is None \
                    else grad
                (out * grad).sum().backward()
                results.append([out] +
                               [t.grad for t in leaves if t is not None])
            for a, b in zip(*results):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-3)
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
        served.carafe_forward(torch.zeros(1))
    for part in ('carafe_forward', 'make setup-full', 'FORCE_CUDA=1',
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


SITE_SCRIPT = ("import sys, mmcv.ops, mmengine.runner.checkpoint as c\n"
               "print(type(sys.modules['mmcv._ext']).__name__, "
               "'mocoplug' in sys.modules, "
               "c.CheckpointLoader._schemes[''].__module__)\n")


def test_site_hook_acts_in_processes_that_never_import_mocoplug():
    """mocoplug-site.pth (installed with mocoplug): a plain process gets the
    served mmcv._ext and mmengine's fixed checkpoint loader without
    importing mocoplug; MOCOPLUG_SITE_HOOK=0 leaves mmcv-lite as it is."""
    if compiled_mmcv() is not None:
        pytest.skip('a compiled mmcv is installed: nothing is served')
    run = functools.partial(
        subprocess.run, [sys.executable, '-c', SITE_SCRIPT],
        capture_output=True,
        text=True)
    out = run()
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [
        'ServedOps', 'False', 'mocoplug_site.checkpoint'
    ]
    off = run(env=dict(os.environ, MOCOPLUG_SITE_HOOK='0'))
    assert "No module named 'mmcv._ext'" in off.stderr


def test_site_hook_leaves_a_compiled_extension_alone(tmp_path):
    """Where mmcv has an ``_ext`` of its own, the import finds it, with the
    site hook active in the process: the same mmcv without an ``_ext`` gets
    the served kernels there (fails under MOCOPLUG_SITE_HOOK=0)."""
    script = ('import sys; sys.path.insert(0, sys.argv[1])\n'
              'import mmcv._ext as ext\n'
              "hook = any(type(f).__name__ == 'SiteFinder' for f in "
              'sys.meta_path)\n'
              "print(hook, type(ext).__name__, vars(ext).get('COMPILED'))\n")
    out = {}
    for name, ext in (('compiled', 'COMPILED = True\n'), ('lite', None)):
        (tmp_path / name / 'mmcv').mkdir(parents=True)
        (tmp_path / name / 'mmcv' / '__init__.py').write_text('')
        if ext:
            (tmp_path / name / 'mmcv' / '_ext.py').write_text(ext)
        run = subprocess.run(
            [sys.executable, '-c', script,
             str(tmp_path / name)],
            capture_output=True,
            text=True)
        out[name] = run.stdout.split() or run.stderr[-2000:]
    assert out == dict(
        compiled=['True', 'module', 'True'],
        lite=['True', 'ServedOps', 'None'])


PROBE_SCRIPT = (
    'import sys\n'
    'sys.path.insert(0, sys.argv[1]) if len(sys.argv) > 1 else None\n'
    'from mmengine.utils.dl_utils import mmcv_full_available\n'
    'import mmcv._ext\n'
    "print(mmcv_full_available(), 'torchvision' in sys.modules, end=' ')\n"
    'if len(sys.argv) == 1:\n'
    '    import torch\n'
    '    from mmcv.ops import nms\n'
    '    from mmcv.utils.ext_loader import check_ops_exist\n'
    '    nms(torch.zeros(1, 4), torch.ones(1), 0.5)\n'
    "    print(check_ops_exist(), 'torchvision' in sys.modules)\n")


def test_site_hook_keeps_the_full_mmcv_answers(tmp_path):
    """With the served kernels in place, mmengine's mmcv_full_available and
    mmcv's check_ops_exist still answer whether a compiled mmcv._ext is on
    disk (True made mmengine import all of mmcv.ops in every optimizer
    build), and torchvision is imported at the first served kernel call."""
    if compiled_mmcv() is not None:
        pytest.skip('a compiled mmcv is installed: nothing is served')
    run = functools.partial(subprocess.run, capture_output=True, text=True)
    out = run([sys.executable, '-c', PROBE_SCRIPT])
    assert out.stdout.split() == ['False', 'False', 'False', 'True'], \
        out.stderr[-2000:]
    (tmp_path / 'mmcv').mkdir()
    (tmp_path / 'mmcv' / '__init__.py').write_text('')
    (tmp_path / 'mmcv' / '_ext.py').write_text('')
    out = run([sys.executable, '-c', PROBE_SCRIPT, str(tmp_path)])
    assert out.stdout.split() == ['True', 'False'], out.stderr[-2000:]


def test_a_compiled_extension_that_fails_to_import_is_warned(monkeypatch):
    """A compiled mmcv._ext built for another torch used to be replaced by
    the served kernels without a word."""
    import warnings
    monkeypatch.setitem(sys.modules, 'mmcv._ext', None)  # import fails
    monkeypatch.setattr(mmcv_ops, 'compiled_mmcv_ext', lambda: True)
    with pytest.warns(
            RuntimeWarning,
            match='compiled mmcv._ext of this '
            'mmcv fails to import .*mocoplug serves its kernels'):
        assert isinstance(mmcv_ops.serve_mmcv_ops(), ServedOps)
    monkeypatch.setitem(sys.modules, 'mmcv._ext', None)
    monkeypatch.setattr(mmcv_ops, 'compiled_mmcv_ext', lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # mmcv-lite: served, no warning
        assert isinstance(mmcv_ops.serve_mmcv_ops(), ServedOps)


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


# ---- deformable convolution, focal loss, deformable attention -------------


def bilinear_zero(feat, y, x):
    """Bilinear interpolation of ``feat`` (C, H, W) at the points (y, x)
    (each (C, ...), one coordinate grid per channel), the four
    neighbouring pixels weighted by area, a pixel outside the map
    counting as zero."""
    c, h, w = feat.shape
    y0, x0 = y.floor(), x.floor()
    out = torch.zeros_like(y)
    flat = feat.reshape(c, -1)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            weight = (1 - (y - yy).abs()) * (1 - (x - xx).abs())
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            index = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1)).long()
            value = flat.gather(1, index.reshape(c, -1)).reshape(y.shape)
            out = out + torch.where(inside, weight * value, 0)
    return out


def deform_conv_reference(x, offset, weight, mask, bias, stride, pad, dil,
                          groups, deform_groups):
    """Deformable convolution (Dai et al. 2017; with ``mask``, DCNv2, Zhu
    et al. 2019): output (b, o, i, j) sums, over the input channels c of
    o's group and the kernel taps (u, v), weight[o, c, u, v] times the
    input sampled at (i s - p + u d + dy, j s - p + v d + dx), (dy, dx)
    being offset channels 2 (g K + u kw + v) and + 1 of c's deformable
    group g, times mask channel g K + u kw + v."""
    b, cin, h, w = x.shape
    cout, cpg, kh, kw = weight.shape
    taps = kh * kw
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    rows = torch.arange(oh, dtype=x.dtype)[:, None] * stride[0] - pad[0]
    cols = torch.arange(ow, dtype=x.dtype)[None, :] * stride[1] - pad[1]
    group_of = torch.arange(cin) // (cin // deform_groups)
    out = x.new_zeros(b, cout, oh, ow)
    for n in range(b):
        for u in range(kh):
            for v in range(kw):
                k = group_of * taps + u * kw + v  # per input channel
                ys = rows + u * dil[0] + offset[n, 2 * k]
                xs = cols + v * dil[1] + offset[n, 2 * k + 1]
                sampled = bilinear_zero(x[n], ys, xs)
                if mask is not None:
                    sampled = sampled * mask[n, k]
                for g in range(groups):
                    o = slice(g * cout // groups, (g + 1) * cout // groups)
                    c = slice(g * cpg, (g + 1) * cpg)
                    out[n, o] += torch.einsum('oc,chw->ohw',
                                              weight[o, :, u, v], sampled[c])
    if bias is not None:
        out = out + bias[:, None, None]
    return out


DCN_CASES = [  # stride, padding, dilation, groups, deformable groups
    ((1, 1), (1, 1), (1, 1), 1, 1), ((2, 1), (0, 2), (1, 2), 2, 2)
]


def deform_inputs(case, modulated, gen):
    stride, pad, dil, groups, deform_groups = case
    x = torch.rand(2, 4, 7, 6, generator=gen, dtype=torch.float64) * 4
    weight = torch.rand(
        6, 4 // groups, 3, 3, generator=gen, dtype=torch.float64) - 0.5
    oh = (7 + 2 * pad[0] - dil[0] * 2 - 1) // stride[0] + 1
    ow = (6 + 2 * pad[1] - dil[1] * 2 - 1) // stride[1] + 1
    # offsets up to 3 pixels, some samples off the map
    offset = (torch.rand(
        2, deform_groups * 18, oh, ow, generator=gen, dtype=torch.float64) -
              0.5) * 6
    mask = torch.rand(
        2, deform_groups *
        9, oh, ow, generator=gen, dtype=torch.float64) if modulated else None
    bias = torch.rand(6, generator=gen, dtype=torch.float64)
    return x, offset, weight, mask, bias if modulated else None


def mmcv_deform_conv(x, offset, weight, mask, bias, case):
    """mmcv's DeformConv2dFunction / ModulatedDeformConv2dFunction (its
    Python, the kernels of the module under test)."""
    from mmcv.ops.deform_conv import DeformConv2dFunction
    from mmcv.ops.modulated_deform_conv import ModulatedDeformConv2dFunction
    stride, pad, dil, groups, deform_groups = case
    if mask is None:
        return DeformConv2dFunction.apply(x, offset, weight, stride, pad, dil,
                                          groups, deform_groups, False, 32)
    return ModulatedDeformConv2dFunction.apply(x, offset, mask, weight, bias,
                                               stride, pad, dil, groups,
                                               deform_groups)


@pytest.fixture
def served_ext(monkeypatch):
    """mmcv's deform conv, focal loss and deformable attention modules
    calling the served kernels (also where a compiled mmcv is installed)."""
    import mmcv.ops
    served = ServedOps()
    for name in ('deform_conv', 'modulated_deform_conv', 'focal_loss',
                 'multi_scale_deform_attn'):
        monkeypatch.setattr(mmcv.ops, name, sys.modules[f'mmcv.ops.{name}'])
        monkeypatch.setattr(sys.modules[f'mmcv.ops.{name}'], 'ext_module',
                            served)
    return served


@pytest.mark.parametrize('modulated', [False, True], ids=['v1', 'v2'])
@pytest.mark.parametrize('case', DCN_CASES, ids=['3x3', 'strided-grouped'])
def test_deform_conv_is_the_definition(device, served_ext, modulated, case):
    """Forward and every gradient equal the float64 definition's (its
    autograd); gradcheck through mmcv's autograd Function."""
    gen = torch.Generator().manual_seed(7 + modulated)
    inputs = deform_inputs(case, modulated, gen)
    ref = [t if t is None else t.clone().requires_grad_() for t in inputs]
    expected = deform_conv_reference(*ref, *case)
    grad_out = torch.rand(expected.shape, generator=gen, dtype=torch.float64)
    (expected * grad_out).sum().backward()
    ours = [t if t is None else t.to(device).requires_grad_() for t in inputs]
    out = mmcv_deform_conv(*ours, case)
    assert out.device.type == device
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=F64_ATOL)
    (out * grad_out.to(device)).sum().backward()
    for name, a, b in zip(('input', 'offset', 'weight', 'mask', 'bias'), ours,
                          ref):
        if a is not None:
            torch.testing.assert_close(
                a.grad.cpu(), b.grad, rtol=0, atol=F64_ATOL, msg=name)
    assert torch.autograd.gradcheck(
        lambda *t: mmcv_deform_conv(*t, case),
        [t if t is None else t.to(device).requires_grad_() for t in inputs])


def focal_reference(x, target, gamma, alpha, weight=None):
    """Sigmoid focal loss (Lin et al. 2017, Eq. 5 with the alpha balance)
    per logit: -alpha (1-p)^gamma log p for the target class, -(1-alpha)
    p^gamma log(1-p) for the others (class C: background, no target)."""
    p = 1 / (1 + torch.exp(-x))
    t = torch.zeros_like(x)
    fg = target < x.shape[1]
    t[fg.nonzero()[:, 0], target[fg]] = 1
    loss = (-alpha * t * (1 - p)**gamma * torch.log(p) - (1 - alpha) *
            (1 - t) * p**gamma * torch.log(1 - p))
    if weight is not None:
        loss = loss * weight[target][:, None]
    return loss


@pytest.mark.parametrize('gamma,alpha', [(2.0, 0.25), (1.5, 0.5)])
def test_sigmoid_focal_loss_is_the_definition(device, served_ext, gamma,
                                              alpha):
    """mmcv's sigmoid_focal_loss on the served kernels: per-logit values
    and gradient equal the float64 definition's, gradcheck passes, and in
    float32 the mean equals mmdet's Python focal loss (what mmdet runs on
    the CPU; on CUDA it calls this kernel)."""
    from mmcv.ops import sigmoid_focal_loss
    from mmdet.models.losses.focal_loss import py_sigmoid_focal_loss
    gen = torch.Generator().manual_seed(int(gamma * 10))
    x = (torch.rand(40, 5, generator=gen, dtype=torch.float64) - 0.5) * 16
    target = torch.randint(0, 6, (40, ), generator=gen)  # 5: background
    ref = x.clone().requires_grad_()
    expected = focal_reference(ref, target, gamma, alpha)
    grad_out = torch.rand(40, 5, generator=gen, dtype=torch.float64)
    (expected * grad_out).sum().backward()
    ours = x.to(device).requires_grad_()
    out = sigmoid_focal_loss(ours, target.to(device), gamma, alpha, None,
                             'none')
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=F64_ATOL)
    (out * grad_out.to(device)).sum().backward()
    torch.testing.assert_close(
        ours.grad.cpu(), ref.grad, rtol=0, atol=F64_ATOL)
    assert torch.autograd.gradcheck(
        lambda t: sigmoid_focal_loss(t, target.to(device), gamma, alpha, None,
                                     'sum'),
        x.to(device).requires_grad_())
    # class weights (indexed by the target class; foreground rows only)
    weight = torch.rand(5, generator=gen, dtype=torch.float64) + 0.5
    fg = target < 5
    out = sigmoid_focal_loss(x[fg].to(device), target[fg].to(device), gamma,
                             alpha, weight.to(device), 'none')
    torch.testing.assert_close(
        out.cpu(),
        focal_reference(x[fg], target[fg], gamma, alpha, weight),
        rtol=0,
        atol=F64_ATOL)
    # float32 against mmdet's Python loss (one-hot target); float32
    # rounding, ~6e-8 relative per operation over a dozen: rtol 1e-5
    x32, onehot = x.float(), torch.nn.functional.one_hot(target, 6)[:, :5]
    served = sigmoid_focal_loss(
        x32.to(device), target.to(device), gamma, alpha, None, 'mean')
    mmdet = py_sigmoid_focal_loss(
        x32, onehot.float(), gamma=gamma, alpha=alpha, reduction='mean')
    torch.testing.assert_close(served.cpu(), mmdet * 5, rtol=1e-5, atol=0)


def ms_deform_attn_reference(value, shapes, locations, weights):
    """Multi-scale deformable attention (Zhu et al. 2021, Eq. 3): per
    query and head, the sum over levels l and points k of
    weights[l, k] times level l's value map bilinearly sampled at
    locations[l, k] x (W_l, H_l) - 0.5 (normalised (x, y), pixel
    centres at + 0.5; zero outside the map)."""
    bs, _, heads, dims = value.shape
    _, queries, _, levels, points, _ = locations.shape
    out = value.new_zeros(bs, queries, heads, dims)
    start = 0
    for level, (h, w) in enumerate(shapes.tolist()):
        maps = value[:, start:start + h * w].reshape(bs, h, w, heads, dims)
        start += h * w
        for b in range(bs):
            for m in range(heads):
                feat = maps[b, :, :, m].permute(2, 0, 1)  # dims, h, w
                for k in range(points):
                    loc = locations[b, :, m, level, k]
                    ys = (loc[:, 1] * h - 0.5).expand(dims, -1)
                    xs = (loc[:, 0] * w - 0.5).expand(dims, -1)
                    sampled = bilinear_zero(feat, ys, xs)  # dims, queries
                    out[b, :, m] += (
                        weights[b, :, m, level, k][:, None] * sampled.T)
    return out.reshape(bs, queries, heads * dims)


def test_ms_deform_attn_is_the_definition(device, served_ext):
    """mmcv's MultiScaleDeformableAttnFunction (what mmcv runs on CUDA) on
    the served kernels: output and the gradients of values, locations and
    weights equal the float64 definition's; gradcheck passes."""
    from mmcv.ops.multi_scale_deform_attn import \
        MultiScaleDeformableAttnFunction
    gen = torch.Generator().manual_seed(11)
    shapes = torch.tensor([[5, 4], [3, 2]])
    starts = torch.tensor([0, 20])
    value = torch.rand(2, 26, 2, 3, generator=gen, dtype=torch.float64)
    # locations reaching past the map on every side
    locations = torch.rand(
        2, 4, 2, 2, 3, 2, generator=gen, dtype=torch.float64) * 1.4 - 0.2
    weights = torch.rand(2, 4, 2, 2, 3, generator=gen, dtype=torch.float64)
    inputs = (value, locations, weights)
    ref = [t.clone().requires_grad_() for t in inputs]
    expected = ms_deform_attn_reference(ref[0], shapes, ref[1], ref[2])
    grad_out = torch.rand(expected.shape, generator=gen, dtype=torch.float64)
    (expected * grad_out).sum().backward()

    def fn(v, loc, w):
        return MultiScaleDeformableAttnFunction.apply(v, shapes.to(device),
                                                      starts.to(device), loc,
                                                      w, 64)

    ours = [t.to(device).requires_grad_() for t in inputs]
    out = fn(*ours)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=F64_ATOL)
    (out * grad_out.to(device)).sum().backward()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=0, atol=F64_ATOL)
    assert torch.autograd.gradcheck(
        fn, [t.to(device).requires_grad_() for t in inputs])
