# Copyright (c) mocoplug contributors. All rights reserved.
import copy
import logging
from typing import Dict, Optional, Union

import torch.nn as nn
from mmengine.config import Config, ConfigDict
from mmengine.dist import is_distributed
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper, revert_sync_batchnorm
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model
from torch.utils.data import DataLoader

from mocoplug.compat.mmcv_ops import check_mmcv_ops_device, uses_mmcv_ops
from mocoplug.datasets.labelled_folder import fill_data_root
from mocoplug.models.algorithms.base_momentum import BaseMomentumSelfSupervisor
from mocoplug.registry import RUNNERS
from mocoplug.utils import (enabled_default_hooks, fill_pretrained,
                            leave_process_group_at_exit)
from .cpu_distributed import (cpu_model_wrapper_cfg, dist_cfg_for_this_machine,
                              has_accelerator, join_cpu_process_group,
                              wraps_in_ddp)
from .dataloader_options import (without_collate_scope,
                                 without_idle_persistent_workers)

ConfigType = Union[Dict, Config, ConfigDict]


def without_buffer_broadcast(model_wrapper_cfg: Optional[Dict],
                             model: nn.Module) -> Optional[Dict]:
    """The wrapper config, with ``broadcast_buffers=False`` (refusing True)
    when it wraps a momentum model in a ``DistributedDataParallel``: rank
    0's queue and BN statistics would replace every rank's own."""
    if (model_wrapper_cfg is None
            or not isinstance(model, BaseMomentumSelfSupervisor)
            or not wraps_in_ddp(model_wrapper_cfg)):
        return model_wrapper_cfg
    cfg = dict(model_wrapper_cfg)
    if cfg.get('broadcast_buffers', False):
        raise ValueError(
            'model_wrapper_cfg.broadcast_buffers=True: DDP would replace '
            "every rank's MoCo queue and momentum encoder BN statistics by "
            "rank 0's at each forward. Remove it (mocoplug sets False).")
    cfg['broadcast_buffers'] = False
    return cfg


def without_fused_sgd_under_loss_scaling(optim_wrapper):
    """The optimizer wrapper config, with a fused SGD made a foreach one
    where an ``AmpOptimWrapper`` scales the loss (docs/design_notes.md,
    "Fused optimizer kernels")."""
    if not isinstance(optim_wrapper, dict):
        return optim_wrapper
    kind = optim_wrapper.get('type', '')
    kind = kind if isinstance(kind, str) else kind.__name__
    optimizer = optim_wrapper.get('optimizer', {})
    if not (kind.endswith('AmpOptimWrapper') and isinstance(optimizer, dict)
            and optimizer.get('type') == 'SGD' and optimizer.get('fused')):
        return optim_wrapper
    print_log(
        'optim_wrapper.optimizer.fused=True: torch\'s fused SGD diverges '
        'under the loss scaler; using foreach=True instead.',
        logger='current',
        level=logging.WARNING)
    optim_wrapper = copy.deepcopy(optim_wrapper)
    optim_wrapper['optimizer'].update(fused=False, foreach=True)
    return optim_wrapper


def _then_leave(result):
    """``result``, after :func:`leave_process_group_at_exit`."""
    leave_process_group_at_exit()
    return result


@RUNNERS.register_module()
class MoCoRunner(Runner):
    """mmengine's ``Runner``, plus what mocoplug's configs mean.

    The runner of every mocoplug config (`MoCo
    <https://arxiv.org/abs/1911.05722>`_ v1/v2/v3 and the benchmarks;
    docs/user_guides/extending.md). It adds top-level ``pretrained`` and
    ``data_root``, ``default_hooks.NAME=None``, :mod:`.dataloader_options`,
    a check of mmcv's ops on the model's device, :mod:`.cpu_distributed`,
    :func:`without_fused_sgd_under_loss_scaling`,
    :func:`without_buffer_broadcast`, and leaves the process group at exit.
    """

    @classmethod
    def from_cfg(cls, cfg: ConfigType) -> 'MoCoRunner':
        """mmengine's, applying ``pretrained`` and ``data_root`` to a copy
        of ``cfg``."""
        cfg = copy.deepcopy(cfg)
        fill_pretrained(cfg)
        fill_data_root(cfg)
        return super().from_cfg(cfg)

    def setup_env(self, env_cfg: Dict) -> None:
        """mmengine's, joining a gloo group without an accelerator."""
        env_cfg = dict(env_cfg)
        env_cfg['dist_cfg'] = dist_cfg_for_this_machine(
            env_cfg.get('dist_cfg'))
        if self.distributed and not is_distributed() \
                and not has_accelerator():
            join_cpu_process_group(self.launcher, env_cfg['dist_cfg'])
        super().setup_env(env_cfg)

    def wrap_model(self, model_wrapper_cfg: Optional[Dict],
                   model: nn.Module) -> nn.Module:
        """mmengine's, for CPU modules too, without buffer broadcast; then
        checks mmcv's ops on the model's device."""
        if self.distributed and not is_model_wrapper(model):
            if not has_accelerator():
                if any(
                        isinstance(m, nn.SyncBatchNorm)
                        for m in model.modules()):
                    print_log(
                        'no GPU: SyncBN (norm_cfg) needs GPUs; on CPU ranks '
                        'each rank normalises its own batch (BatchNorm)',
                        logger='current',
                        level=logging.WARNING)
                    model = revert_sync_batchnorm(model)
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

    def _maybe_compile(self, target: str) -> None:
        """mmengine's ``compile``; for a MoCo model, its encoders in place,
        not ``train_step`` (docs/design_notes.md, "Compile")."""
        options, model = self.cfg.get('compile'), get_ori_model(self.model)
        if not options or not isinstance(model, BaseMomentumSelfSupervisor):
            return super()._maybe_compile(target)
        model.compile_encoders(**({} if options is True else options))

    def build_optim_wrapper(self, optim_wrapper):
        """mmengine's, via :func:`without_fused_sgd_under_loss_scaling`."""
        return super().build_optim_wrapper(
            without_fused_sgd_under_loss_scaling(optim_wrapper))

    @staticmethod
    def build_dataloader(dataloader: Union[DataLoader, Dict],
                         seed: Optional[int] = None,
                         diff_rank_seed: bool = False) -> DataLoader:
        """mmengine's, via :mod:`.dataloader_options`."""
        if isinstance(dataloader, dict):
            dataloader = without_idle_persistent_workers(dataloader)
            dataloader = without_collate_scope(dataloader)
        return Runner.build_dataloader(
            dataloader, seed=seed, diff_rank_seed=diff_rank_seed)

    def train(self) -> nn.Module:
        return _then_leave(super().train())

    def val(self) -> dict:
        return _then_leave(super().val())

    def test(self) -> dict:
        return _then_leave(super().test())

    def register_default_hooks(
            self,
            hooks: Optional[Dict[str, Union[Hook, Dict]]] = None) -> None:
        """mmengine's, accepting None for any default hook name."""
        if hooks is not None:
            hooks = enabled_default_hooks(hooks)
        super().register_default_hooks(hooks)
