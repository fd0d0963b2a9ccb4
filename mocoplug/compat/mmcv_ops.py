# Copyright (c) mocoplug contributors. All rights reserved.
"""mmcv's compiled ops served by torchvision where mmcv has none
(docs/design_notes.md#mmcvs-ops-from-torchvision)."""
import importlib
import sys
import warnings
from typing import Optional

import torch

from mocoplug_site import compiled_mmcv_ext
from mocoplug_site.mmcv_ext import (EXT_NAME, FULL_MMCV, SERVED,
                                    MMCVOpNotServedError, ServedOps)

EXT = EXT_NAME
__all__ = [
    'EXT', 'FULL_MMCV', 'SERVED', 'MMCVOpNotServedError', 'MMCVOpsDeviceError',
    'ServedOps', 'serve_mmcv_ops', 'check_mmcv_ops_device', 'uses_mmcv_ops'
]


class MMCVOpsDeviceError(RuntimeError):
    """mmcv's compiled ops cannot run on the device of the model."""


def serve_mmcv_ops() -> Optional[ServedOps]:
    """Put :class:`ServedOps` in ``sys.modules`` unless a compiled
    ``mmcv._ext`` imports; return it, or None (idempotent)."""
    current = sys.modules.get(EXT)
    if isinstance(current, ServedOps):
        return current
    try:  # the .pth hook's finder serves mmcv-lite here
        ext = importlib.import_module(EXT)
    except ImportError as error:  # no hook, or built for another torch
        if compiled_mmcv_ext():  # one is installed and fails: say so
            warnings.warn(
                f'the compiled mmcv._ext of this mmcv fails to import '
                f'({type(error).__name__}: {error}); mocoplug serves its '
                f'kernels instead ({", ".join(SERVED)}), the others raise. '
                f'Reinstall mmcv for torch {torch.__version__} '
                f'({FULL_MMCV}) or install mmcv-lite.',
                RuntimeWarning,
                stacklevel=2)
        ext = sys.modules[EXT] = ServedOps(str(error))
    return ext if isinstance(ext, ServedOps) else None


def check_mmcv_ops_device(device: torch.device) -> None:
    """Raise :class:`MMCVOpsDeviceError` when a compiled ``mmcv._ext``
    without CUDA kernels would run the ops of a model on ``device``."""
    ext = sys.modules.get(EXT)
    if device.type != 'cuda' or ext is None or isinstance(ext, ServedOps):
        return
    if ext.get_compiling_cuda_version() == 'not available':
        raise MMCVOpsDeviceError(
            'This detector runs on CUDA, but the installed mmcv has no CUDA '
            'kernels. Install mmcv-lite (`pip uninstall -y mmcv && pip '
            'install mmcv-lite==2.1.0`; mocoplug serves its ops) or '
            f'{FULL_MMCV} on a machine with nvcc.')


def uses_mmcv_ops(model: torch.nn.Module) -> bool:
    """Whether ``model`` is an mmdet model or holds an ``mmcv.ops`` one."""
    return type(model).__module__.startswith('mmdet.') or any(
        type(m).__module__.startswith('mmcv.ops') for m in model.modules())
