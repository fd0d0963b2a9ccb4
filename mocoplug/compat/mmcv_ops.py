# Copyright (c) mocoplug contributors. All rights reserved.
"""mmcv's detection ops served by torchvision where mmcv has no compiled ops.

mmcv's Python ops (``mmcv.ops.RoIAlign``, ``nms``, ``batched_nms``, ...)
call kernels of the extension module ``mmcv._ext``, which mmcv-lite lacks.
:func:`serve_mmcv_ops` puts a module of that name in ``sys.modules`` when
the real one does not import; its ``nms``, ``roi_align_forward`` and
``roi_align_backward`` run torchvision's kernels (CPU and CUDA) under
mmcv's calling conventions, which is all that the shipped detectors call.
Any other kernel is importable (mmcv and mmdet import many at module level)
and raises :class:`MMCVOpNotServedError` when called. A compiled
``mmcv._ext`` is used as it is; :func:`check_mmcv_ops_device` refuses one
built without CUDA for a detector on CUDA. Why these are the same
computation: docs/design_notes.md, "mmcv's ops from torchvision".
"""
import importlib
import importlib.machinery
import sys
import types
from typing import Optional

import torch
import torchvision
from torch import Tensor
from torchvision.ops import nms as torchvision_nms
from torchvision.ops import roi_align as torchvision_roi_align

EXT = 'mmcv._ext'
SERVED = ('nms', 'roi_align_forward', 'roi_align_backward')
FULL_MMCV = ('`make setup-full` (mmcv 2.1.0 compiled with its ops; on a '
             'machine with the CUDA toolkit it builds the CUDA kernels, '
             'FORCE_CUDA=1)')


class MMCVOpNotServedError(RuntimeError):
    """An mmcv kernel that neither a compiled mmcv nor torchvision serves
    here."""


class MMCVOpsDeviceError(RuntimeError):
    """mmcv's compiled ops cannot run on the device of the model."""


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float,
        offset: int) -> Tensor:
    """``mmcv._ext.nms``: indices of the boxes that greedy NMS keeps, by
    decreasing score; box sides are ``x2 - x1 + offset``."""
    if offset:  # the same IoU as the boxes grown by `offset` at x2, y2
        boxes = torch.cat([boxes[:, :2], boxes[:, 2:] + offset], dim=1)
    return torchvision_nms(boxes, scores, iou_threshold)


def _check_avg(pool_mode: int) -> None:
    if pool_mode != 1:
        raise MMCVOpNotServedError(
            "RoIAlign with pool_mode='max' has no torchvision kernel "
            "(torchvision averages, pool_mode='avg'); it needs mmcv's "
            f'compiled ops: {FULL_MMCV}.')


def roi_align_forward(input: Tensor, rois: Tensor, output: Tensor,
                      argmax_y: Tensor, argmax_x: Tensor, aligned_height: int,
                      aligned_width: int, spatial_scale: float,
                      sampling_ratio: int, pool_mode: int,
                      aligned: bool) -> None:
    """``mmcv._ext.roi_align_forward``: writes RoIAlign of ``rois``
    (``(K, 5)``: batch index, x1, y1, x2, y2) into ``output`` (average
    pooling only; the argmax buffers of max pooling stay unused)."""
    _check_avg(pool_mode)
    output.copy_(
        torchvision_roi_align(input, rois, (aligned_height, aligned_width),
                              spatial_scale, sampling_ratio, aligned))


def roi_align_backward(grad_output: Tensor, rois: Tensor, argmax_y: Tensor,
                       argmax_x: Tensor, grad_input: Tensor,
                       aligned_height: int, aligned_width: int,
                       spatial_scale: float, sampling_ratio: int,
                       pool_mode: int, aligned: bool) -> None:
    """``mmcv._ext.roi_align_backward``: writes the gradient of RoIAlign
    with respect to its input into ``grad_input``."""
    _check_avg(pool_mode)
    n, c, h, w = grad_input.shape
    grad_input.copy_(
        torch.ops.torchvision._roi_align_backward(grad_output, rois,
                                                  spatial_scale,
                                                  aligned_height,
                                                  aligned_width, n, c, h, w,
                                                  sampling_ratio, aligned))


class ServedOps(types.ModuleType):
    """The module that stands in for ``mmcv._ext``: the kernels above, and
    for every other name a function that raises
    :class:`MMCVOpNotServedError`."""

    nms = staticmethod(nms)
    roi_align_forward = staticmethod(roi_align_forward)
    roi_align_backward = staticmethod(roi_align_backward)

    def __init__(self, reason: str = '') -> None:
        super().__init__(EXT, 'mmcv ops served by torchvision (mocoplug)')
        self.__spec__ = importlib.machinery.ModuleSpec(EXT, None)
        self.reason = reason

    def __getattr__(self, name: str):
        if name.startswith('__'):
            raise AttributeError(name)

        def not_served(*args, **kwargs):
            raise MMCVOpNotServedError(
                f'mmcv op kernel `{name}` is not available: this mmcv has '
                f'no compiled ops ({self.reason or "mmcv-lite"}), and '
                'mocoplug serves only ' + ', '.join(SERVED) +
                ' (through torchvision), what the shipped detectors call. '
                f'For `{name}` install mmcv with its ops: {FULL_MMCV}.')

        not_served.__name__ = name
        return not_served

    @staticmethod
    def get_compiler_version() -> str:
        return f'torchvision {torchvision.__version__} (served by mocoplug)'

    @staticmethod
    def get_compiling_cuda_version() -> str:
        return torch.version.cuda or 'not available'


def serve_mmcv_ops() -> Optional[ServedOps]:
    """Put :class:`ServedOps` in ``sys.modules`` unless ``mmcv._ext``
    imports (idempotent).

    Returns:
        ServedOps or None: the served module, or None where mmcv's compiled
        ops load and are used as they are.
    """
    current = sys.modules.get(EXT)
    if isinstance(current, ServedOps):
        return current
    try:
        importlib.import_module(EXT)
        return None
    except ImportError as error:  # mmcv-lite, or built for another torch
        served = ServedOps(str(error))
        sys.modules[EXT] = served
        return served


def check_mmcv_ops_device(device: torch.device) -> None:
    """Raise :class:`MMCVOpsDeviceError` when a compiled ``mmcv._ext``
    without CUDA kernels would run the ops of a model on CUDA.

    Args:
        device (torch.device): Where the model's parameters are.
    """
    ext = sys.modules.get(EXT)
    if device.type != 'cuda' or ext is None or isinstance(ext, ServedOps):
        return
    if ext.get_compiling_cuda_version() == 'not available':
        raise MMCVOpsDeviceError(
            'This detector runs on CUDA, but the installed mmcv was compiled '
            'without CUDA kernels (mmcv.ops.get_compiling_cuda_version() is '
            "'not available'): its RoIAlign/nms would stop at the first "
            "batch with 'implementation for device cuda:0 not found'. Either "
            'install mmcv-lite (`pip uninstall -y mmcv && pip install '
            'mmcv-lite==2.1.0`), whose ops mocoplug serves with torchvision '
            f'on CPU and CUDA, or {FULL_MMCV} on a machine with nvcc.')


def uses_mmcv_ops(model: torch.nn.Module) -> bool:
    """Whether ``model`` is an mmdet model or holds a module of
    ``mmcv.ops``."""
    return type(model).__module__.startswith('mmdet.') or any(
        type(m).__module__.startswith('mmcv.ops') for m in model.modules())
