# Copyright (c) mocoplug contributors. All rights reserved.
import copy
import logging
from typing import Dict, Optional, Union

import torch.nn as nn
from mmengine.config import Config, ConfigDict
from mmengine.dist import is_distributed
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.registry import MODEL_WRAPPERS
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from mocoplug.compat.mmcv_ops import check_mmcv_ops_device, uses_mmcv_ops
from mocoplug.datasets.labelled_folder import fill_data_root
from mocoplug.models.algorithms.base_momentum import BaseMomentumSelfSupervisor
from mocoplug.registry import RUNNERS
from mocoplug.utils import (enabled_default_hooks, fill_pretrained,
                            leave_process_group_at_exit)
from .cpu_distributed import (cpu_model_wrapper_cfg, dist_cfg_for_this_machine,
                              has_accelerator, join_cpu_process_group)
from .dataloader_options import (without_collate_scope,
                                 without_idle_persistent_workers)

ConfigType = Union[Dict, Config, ConfigDict]


def without_buffer_broadcast(model_wrapper_cfg: Optional[Dict],
                             model: nn.Module) -> Optional[Dict]:
    """The wrapper config, with ``broadcast_buffers=False`` when it wraps a
    MoCo (momentum) model in a ``DistributedDataParallel``.

    With torch's default (``True``) DDP would send rank 0's buffers at every
    forward: the queue, its ids and pointer and both encoders' BN
    statistics, replacing each rank's own. ``None`` (mmengine's default DDP,
    which broadcasts nothing) and other wrappers are returned as given.

    Raises:
        ValueError: The config asks for ``broadcast_buffers=True``.
    """
    if model_wrapper_cfg is None or not isinstance(model,
                                                   BaseMomentumSelfSupervisor):
        return model_wrapper_cfg
    cfg = dict(model_wrapper_cfg)
    wrapper = MODEL_WRAPPERS.get(cfg.get('type', 'MMDistributedDataParallel'))
    if not (isinstance(wrapper, type)
            and issubclass(wrapper, DistributedDataParallel)):
        return model_wrapper_cfg
    if cfg.get('broadcast_buffers', False):
        raise ValueError(
            'model_wrapper_cfg.broadcast_buffers=True: DDP would replace '
            "every rank's MoCo queue and momentum encoder BN statistics by "
            "rank 0's at each forward. Remove it (mocoplug sets False).")
    cfg['broadcast_buffers'] = False
    return cfg


def without_fused_sgd_under_loss_scaling(optim_wrapper):
    """The optimizer wrapper config, with a fused SGD made a foreach one
    where an ``AmpOptimWrapper`` scales the loss.

    torch's fused SGD takes over the loss scaler's overflow handling, but on
    a step the scaler must skip (routine in the first fp16 iterations) it
    still writes its momentum buffer, with values that were never computed:
    the weights diverge the step after (seen on CUDA: a NaN loss at
    iteration 4 of the R50 config with ``--amp``). Other configs are
    returned as given.
    """
    if not isinstance(optim_wrapper, dict):
        return optim_wrapper
    kind = optim_wrapper.get('type', '')
    kind = kind if isinstance(kind, str) else kind.__name__
    optimizer = optim_wrapper.get('optimizer', {})
    if not (kind.endswith('AmpOptimWrapper') and isinstance(optimizer, dict)
            and optimizer.get('type') == 'SGD' and optimizer.get('fused')):
        return optim_wrapper
    print_log(
        'optim_wrapper.optimizer.fused=True: torch\'s fused SGD writes its '
        'momentum on the steps the AmpOptimWrapper\'s loss scaler skips, '
        'which diverges; using foreach=True instead (bfloat16 needs no loss '
        "scaler: optim_wrapper.type='mocoplug.BF16OptimWrapper').",
        logger='current',
        level=logging.WARNING)
    optim_wrapper = copy.deepcopy(optim_wrapper)
    optim_wrapper['optimizer'].update(fused=False, foreach=True)
    return optim_wrapper


@RUNNERS.register_module()
class MoCoRunner(Runner):
    """mmengine's ``Runner``, plus what mocoplug's configs mean.

    The runner of every mocoplug config (pretraining of `Momentum Contrast
    for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ and its v2/v3, the linear, kNN and
    detection benchmarks), named by ``runner_type = 'mocoplug.MoCoRunner'``
    and built by every entry point that calls ``RUNNERS.build(cfg)``
    (usage: docs/user_guides/extending.md). ``Runner.from_cfg(cfg)``
    ignores ``runner_type``; a ``pretrained=`` given that way stops
    training with an error that says so.

    From the config, when it is built (:meth:`from_cfg`):

    - ``pretrained=CKPT`` reaches every ``init_cfg`` of mocoplug's
      ``Pretrained`` initialiser (:func:`mocoplug.utils.fill_pretrained`),
      e.g. a C4 detector's backbone and res5 head;
    - ``data_root=DIR`` reaches the labelled folder datasets of the
      ``*_folder`` configs, and their classes the head
      (:func:`mocoplug.datasets.fill_data_root`).

    While it runs:

    - ``default_hooks.NAME=None`` switches off any default hook, mocoplug's
      too (:func:`mocoplug.utils.enabled_default_hooks`; mmengine 0.10.7
      asserts on names other than its own);
    - a dataloader without workers ignores ``persistent_workers=True``
      (mmpretrain's ``tools/train.py`` sets it everywhere), and a
      ``collate_fn`` inherited through ``mmpretrain::``/``mocoplug::``
      loses the ``_scope_`` tag mmengine would pass to the function;
    - a detector on CUDA with a compiled mmcv that has no CUDA kernels
      stops before training (:func:`mocoplug.compat.check_mmcv_ops_device`);
    - without an accelerator, a distributed run (``--launcher pytorch``)
      joins a gloo process group and wraps the model in DDP for CPU
      modules; with one, the config's backend stays (nccl by default);
    - a fused SGD becomes a foreach one under an ``AmpOptimWrapper``
      (:func:`without_fused_sgd_under_loss_scaling`);
    - a MoCo model's DDP never broadcasts buffers, whatever
      ``model_wrapper_cfg`` says (:func:`without_buffer_broadcast`);
    - after a run ends without an error, the process leaves the process
      group when it exits (:func:`mocoplug.utils.leave_process_group`).
    """

    @classmethod
    def from_cfg(cls, cfg: ConfigType) -> 'MoCoRunner':
        """Build the runner from a config, applying its top-level options
        ``pretrained`` and ``data_root``.

        Args:
            cfg (dict or Config): The config, as for mmengine's
                ``Runner.from_cfg``; not changed.

        Returns:
            MoCoRunner: The runner.
        """
        cfg = copy.deepcopy(cfg)
        fill_pretrained(cfg)
        fill_data_root(cfg)
        return super().from_cfg(cfg)

    def setup_env(self, env_cfg: Dict) -> None:
        """mmengine's set-up, joining a gloo group for a distributed run
        on a machine without an accelerator (see
        :mod:`mocoplug.engine.runner.cpu_distributed`)."""
        env_cfg = dict(env_cfg)
        env_cfg['dist_cfg'] = dist_cfg_for_this_machine(
            env_cfg.get('dist_cfg'))
        if self.distributed and not is_distributed() \
                and not has_accelerator():
            join_cpu_process_group(self.launcher, env_cfg['dist_cfg'])
        super().setup_env(env_cfg)

    def wrap_model(self, model_wrapper_cfg: Optional[Dict],
                   model: nn.Module) -> nn.Module:
        """mmengine's wrapping; DDP takes CPU modules on a machine without
        an accelerator, never broadcasts a momentum model's buffers
        (:func:`without_buffer_broadcast`); a model that runs mmcv's ops
        must find them on its device."""
        if self.distributed and not is_model_wrapper(model):
            if not has_accelerator():
                find_unused = self.cfg.get('find_unused_parameters', False)
                model_wrapper_cfg = cpu_model_wrapper_cfg(
                    model_wrapper_cfg, find_unused)
            model_wrapper_cfg = without_buffer_broadcast(
                model_wrapper_cfg, model)
        wrapped = super().wrap_model(model_wrapper_cfg, model)
        model = get_ori_model(wrapped)
        params = next(model.parameters(), None)
        if params is not None and uses_mmcv_ops(model):
            check_mmcv_ops_device(params.device)
        return wrapped

    def build_optim_wrapper(self, optim_wrapper):
        """mmengine's, via :func:`without_fused_sgd_under_loss_scaling`."""
        return super().build_optim_wrapper(
            without_fused_sgd_under_loss_scaling(optim_wrapper))

    @staticmethod
    def build_dataloader(dataloader: Union[DataLoader, Dict],
                         seed: Optional[int] = None,
                         diff_rank_seed: bool = False) -> DataLoader:
        """mmengine's, without ``persistent_workers`` for a dataloader
        that has no workers and without an inherited ``collate_fn``'s
        ``_scope_`` tag."""
        if isinstance(dataloader, dict):
            dataloader = without_idle_persistent_workers(dataloader)
            dataloader = without_collate_scope(dataloader)
        return Runner.build_dataloader(
            dataloader, seed=seed, diff_rank_seed=diff_rank_seed)

    def train(self) -> nn.Module:
        """Train; see mmengine's ``Runner.train``."""
        model = super().train()
        leave_process_group_at_exit()
        return model

    def val(self) -> dict:
        """Validate; see mmengine's ``Runner.val``."""
        metrics = super().val()
        leave_process_group_at_exit()
        return metrics

    def test(self) -> dict:
        """Test; see mmengine's ``Runner.test``."""
        metrics = super().test()
        leave_process_group_at_exit()
        return metrics

    def register_default_hooks(
            self,
            hooks: Optional[Dict[str, Union[Hook, Dict]]] = None) -> None:
        """mmengine's, accepting None for any default hook name."""
        if hooks is not None:
            hooks = enabled_default_hooks(hooks)
        super().register_default_hooks(hooks)
