# Copyright (c) mocoplug contributors. All rights reserved.
"""Distributed runs on a machine without an accelerator.

mmengine 0.10.7 assumes an accelerator in a distributed run: its launchers
call ``torch.cuda.set_device`` before joining the process group, its
default model wrapper gives DDP ``device_ids=[LOCAL_RANK]``, and the
mmpretrain/mmdet runtime configs name the ``nccl`` backend, which needs
CUDA. Each fails on a CPU-only machine; these functions give the CPU
equivalent, and change nothing where an accelerator is present.
"""
import datetime
from typing import Optional

import torch.distributed as dist
from mmengine.device import get_device
from mmengine.logging import print_log
from mmengine.registry import MODEL_WRAPPERS
from torch.nn.parallel import DistributedDataParallel

# The backends that need an accelerator (torch's, and mmengine's names for
# the other devices it knows).
ACCELERATOR_BACKENDS = ('nccl', 'hccl', 'cncl', 'mccl')


def has_accelerator() -> bool:
    """Whether mmengine found a GPU (or NPU, MLU, MUSA, MPS) to train on."""
    return get_device() != 'cpu'


def dist_cfg_for_this_machine(dist_cfg: Optional[dict]) -> dict:
    """The config's ``env_cfg.dist_cfg`` with a backend this machine runs.

    Without an accelerator, ``nccl`` (mmengine's default and the
    mmpretrain/mmdet configs') becomes ``gloo``; with one, the config's
    choice stays, so a config need not name its backend for either.

    Args:
        dist_cfg (dict, optional): ``env_cfg.dist_cfg`` of the config.

    Returns:
        dict: A new dict with ``backend`` always set.
    """
    dist_cfg = dict(dist_cfg or {})
    backend = dist_cfg.setdefault('backend', 'nccl')
    if not has_accelerator() and backend in ACCELERATOR_BACKENDS:
        print_log(
            f'no GPU: the process group uses gloo (env_cfg.dist_cfg.backend '
            f'is {backend!r}, which needs GPUs)',
            logger='current')
        dist_cfg['backend'] = 'gloo'
    return dist_cfg


def join_cpu_process_group(launcher: str, dist_cfg: dict) -> None:
    """Join the default process group as mmengine's ``init_dist`` does for
    ``launcher='pytorch'`` (torchrun's ``RANK``/``WORLD_SIZE``/
    ``MASTER_ADDR`` environment), without selecting a GPU.

    Args:
        launcher (str): The job launcher; only ``'pytorch'`` is supported
            without an accelerator.
        dist_cfg (dict): ``env_cfg.dist_cfg``: ``backend`` and the keyword
            arguments of ``init_process_group`` (``timeout`` in seconds).
    """
    if launcher != 'pytorch':
        raise RuntimeError(
            f'launcher={launcher!r} on a machine without a GPU: mmengine\'s '
            f'{launcher} launcher selects a GPU per process. Start CPU '
            'processes with torchrun and --launcher pytorch (as '
            'tools/dist_train.sh does).')
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
        f'CPU with {backend}',
        logger='current')


def cpu_model_wrapper_cfg(model_wrapper_cfg: Optional[dict],
                          find_unused_parameters: bool = False) -> dict:
    """The model wrapper config of a distributed run on CPUs.

    As mmengine's on GPUs (``MMDistributedDataParallel`` without buffer
    broadcast when the config gives none, the config's wrapper otherwise),
    but DDP wrappers get ``device_ids=None``, which is how torch's DDP
    takes CPU modules. Without ``broadcast_buffers=False`` DDP would send
    every buffer from rank 0 at each forward, MoCo's K x C queue included.

    Args:
        model_wrapper_cfg (dict, optional): ``model_wrapper_cfg`` of the
            config.
        find_unused_parameters (bool): ``find_unused_parameters`` of the
            config, used when it gives no wrapper (as mmengine does).

    Returns:
        dict: A new wrapper config.
    """
    if model_wrapper_cfg is None:
        cfg = dict(
            type='MMDistributedDataParallel',
            broadcast_buffers=False,
            find_unused_parameters=find_unused_parameters)
    else:
        cfg = dict(model_wrapper_cfg)
        cfg.setdefault('type', 'MMDistributedDataParallel')
    wrapper = MODEL_WRAPPERS.get(cfg['type'])
    if isinstance(wrapper, type) and issubclass(wrapper,
                                                DistributedDataParallel):
        cfg['device_ids'] = None
    return cfg
