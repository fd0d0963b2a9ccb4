# Copyright (c) mocoplug contributors. All rights reserved.
"""Distributed runs on a machine without an accelerator (mmengine 0.10.7's
launchers, DDP wrapper and ``nccl`` backend need a GPU)."""
import datetime
from typing import Optional

import torch.distributed as dist
from mmengine.device import get_device
from mmengine.logging import print_log
from mmengine.registry import MODEL_WRAPPERS
from torch.nn.parallel import DistributedDataParallel

ACCELERATOR_BACKENDS = ('nccl', 'hccl', 'cncl', 'mccl')


def has_accelerator() -> bool:
    """Whether mmengine found a GPU (or NPU, MLU, MUSA, MPS) to train on."""
    return get_device() != 'cpu'


def dist_cfg_for_this_machine(dist_cfg: Optional[dict]) -> dict:
    """A copy of the config's ``env_cfg.dist_cfg`` with ``backend`` set to
    one this machine runs (``nccl`` becomes ``gloo`` without a GPU)."""
    dist_cfg = dict(dist_cfg or {})
    backend = dist_cfg.setdefault('backend', 'nccl')
    if not has_accelerator() and backend in ACCELERATOR_BACKENDS:
        print_log(
            f'no GPU: the process group uses gloo (env_cfg.dist_cfg.backend '
            f'is {backend!r}, which needs GPUs)', 'current')
        dist_cfg['backend'] = 'gloo'
    return dist_cfg


def join_cpu_process_group(launcher: str, dist_cfg: dict) -> None:
    """Join the default process group as mmengine's ``init_dist`` does for
    ``launcher='pytorch'`` (torchrun), without selecting a GPU.

    Args:
        launcher (str): The job launcher; only ``'pytorch'``.
        dist_cfg (dict): ``backend`` and ``init_process_group``'s kwargs.
    """
    if launcher != 'pytorch':
        raise RuntimeError(
            f'launcher={launcher!r} needs a GPU; start CPU processes with '
            'torchrun and --launcher pytorch (tools/dist_train.sh).')
    kwargs = dict(dist_cfg)
    backend = kwargs.pop('backend')
    init_backend = kwargs.pop('init_backend', 'torch')
    if init_backend != 'torch':
        raise RuntimeError(
            f'env_cfg.dist_cfg.init_backend={init_backend!r} needs a GPU; '
            "without one only 'torch' is supported.")
    if kwargs.get('timeout') is not None:  # seconds, as mmengine reads it
        kwargs['timeout'] = datetime.timedelta(seconds=kwargs['timeout'])
    dist.init_process_group(backend=backend, **kwargs)
    print_log(
        f'no GPU: rank {dist.get_rank()}/{dist.get_world_size()} runs on '
        f'CPU with {backend}', 'current')


def init_dist_for_this_machine(launcher: str,
                               dist_cfg: Optional[dict] = None) -> None:
    """mmengine's ``init_dist`` for a tool outside the Runner: on a GPU
    machine as is, without one a gloo group of CPU processes."""
    dist_cfg = dist_cfg_for_this_machine(dist_cfg)
    if has_accelerator():
        from mmengine.dist import init_dist
        init_dist(launcher, **dist_cfg)
    else:
        join_cpu_process_group(launcher, dist_cfg)


def cpu_model_wrapper_cfg(model_wrapper_cfg: Optional[dict],
                          find_unused_parameters: bool = False) -> dict:
    """A new model wrapper config for a distributed run on CPUs: the
    config's or mmengine's default (with ``find_unused_parameters``),
    ``device_ids=None`` for DDP wrappers."""
    cfg = dict(
        broadcast_buffers=False, find_unused_parameters=find_unused_parameters
    ) if model_wrapper_cfg is None else dict(model_wrapper_cfg)
    cfg.setdefault('type', 'MMDistributedDataParallel')
    if wraps_in_ddp(cfg):
        cfg['device_ids'] = None
    return cfg


def wraps_in_ddp(model_wrapper_cfg: dict,
                 kind: type = DistributedDataParallel) -> bool:
    """Whether the wrapper config builds a ``kind`` (by default a
    ``DistributedDataParallel``)."""
    wrapper = MODEL_WRAPPERS.get(
        model_wrapper_cfg.get('type', 'MMDistributedDataParallel'))
    return isinstance(wrapper, type) and issubclass(wrapper, kind)
