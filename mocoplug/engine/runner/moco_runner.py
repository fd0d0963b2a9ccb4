# Copyright (c) mocoplug contributors. All rights reserved.
import copy
import logging
import os
from typing import Dict, Optional, Union

import torch
import torch.nn as nn
from mmengine.config import Config, ConfigDict
from mmengine.dist import is_distributed
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper, revert_sync_batchnorm
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model
from torch.utils.data import DataLoader

from mocoplug.compat.mmcv_ops import check_mmcv_ops_device, uses_mmcv_ops
from mocoplug.datasets.labelled_folder import fill_data_root
from mocoplug.engine.hooks.runner_info import param_groups, step_images
from mocoplug.models.algorithms.base_momentum import BaseMomentumSelfSupervisor
from mocoplug.registry import RUNNERS
from mocoplug.utils import (enabled_default_hooks, fill_pretrained,
                            leave_process_group_at_exit)
from .cpu_distributed import (cpu_model_wrapper_cfg, dist_cfg_for_this_machine,
                              has_accelerator, join_cpu_process_group,
                              wraps_in_ddp)
from .dataloader_options import (without_collate_scope,
                                 without_idle_persistent_workers)
from .run_checks import check_bands, check_data_roots, check_loop_trains

ConfigType = Union[Dict, Config, ConfigDict]


def without_buffer_broadcast(model_wrapper_cfg: Optional[Dict],
                             model: nn.Module,
                             find_unused: bool = False) -> Optional[Dict]:
    """The wrapper config of a momentum model: ``broadcast_buffers=False``
    (True refused) and the config's top-level ``find_unused_parameters``
    for a ``DistributedDataParallel``; an FSDP wrapper is refused."""
    if model_wrapper_cfg is None or not isinstance(model,
                                                   BaseMomentumSelfSupervisor):
        return model_wrapper_cfg
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    if wraps_in_ddp(model_wrapper_cfg, FSDP):
        raise ValueError(
            f'model_wrapper_cfg.type={model_wrapper_cfg.get("type")!r}: '
            f'{type(model).__name__} updates its momentum encoder from the '
            'online parameters one by one and gathers keys across ranks, '
            'which a sharding or flattening wrapper (FSDP) breaks. Use '
            "dict(type='MMDistributedDataParallel') or remove "
            'model_wrapper_cfg.')
    if not wraps_in_ddp(model_wrapper_cfg):
        return model_wrapper_cfg
    if model_wrapper_cfg.get('broadcast_buffers', False):
        raise ValueError(
            'model_wrapper_cfg.broadcast_buffers=True: DDP would replace '
            "every rank's MoCo queue and momentum encoder BN statistics by "
            "rank 0's at each forward. Remove it (mocoplug sets False).")
    cfg = dict(model_wrapper_cfg, broadcast_buffers=False)
    if find_unused:
        cfg.setdefault('find_unused_parameters', True)
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
        'under the loss scaler; using foreach=True instead.', 'current',
        logging.WARNING)
    optim_wrapper = copy.deepcopy(optim_wrapper)
    optim_wrapper['optimizer'].update(fused=False, foreach=True)
    return optim_wrapper


def deterministic_cublas(deterministic: bool, cuda: bool) -> None:
    """``randomness.deterministic=True`` on CUDA: set
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless set."""
    if not (cuda
            and deterministic) or os.environ.get('CUBLAS_WORKSPACE_CONFIG'):
        return
    os.environ['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'
    print_log(
        'randomness.deterministic=True on CUDA: CUBLAS_WORKSPACE_CONFIG='
        ':4096:8 set, as deterministic cuBLAS needs (export it to choose '
        ':16:8, less memory, slower)', 'current')


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
        if cfg.get('strategy'):
            raise ValueError(
                f'strategy={cfg.strategy!r} is read by mmengine\'s '
                'FlexibleRunner only, and MoCoRunner (runner_type) would '
                'ignore it and train with DDP: remove strategy (DDP options '
                'go in model_wrapper_cfg).')
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

    def set_randomness(self, seed, diff_rank_seed=False, deterministic=False):
        """mmengine's, with :func:`deterministic_cublas` first."""
        deterministic_cublas(deterministic, torch.cuda.is_available())
        super().set_randomness(seed, diff_rank_seed, deterministic)

    def wrap_model(self, model_wrapper_cfg: Optional[Dict],
                   model: nn.Module) -> nn.Module:
        """mmengine's, for CPU modules too, without buffer broadcast; then
        checks mmcv's ops on the model's device."""
        if self.distributed and not is_model_wrapper(model):
            find_unused = self.cfg.get('find_unused_parameters', False)
            if not has_accelerator():
                if any(
                        isinstance(m, nn.SyncBatchNorm)
                        for m in model.modules()):
                    print_log(
                        'no GPU: SyncBN (norm_cfg) needs GPUs; on CPU ranks '
                        'each rank normalises its own batch (BatchNorm)',
                        'current', logging.WARNING)
                    model = revert_sync_batchnorm(model)
                model_wrapper_cfg = cpu_model_wrapper_cfg(
                    model_wrapper_cfg, find_unused)
            model_wrapper_cfg = without_buffer_broadcast(
                model_wrapper_cfg, model, find_unused)
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

    def build_train_loop(self, loop):
        """mmengine's; in :meth:`train`, refusing a data root without images
        before, and after it images whose bands or bits the loader drops and
        a loop that cannot train (:mod:`.run_checks`)."""
        training = getattr(self, '_training', False)
        if training and isinstance(loop, dict):
            check_data_roots(self._train_dataloader)
        loop = super().build_train_loop(loop)
        if training:
            check_bands(loop)
            check_loop_trains(loop)
        return loop

    def scale_lr(self, optim_wrapper, auto_scale_lr=None) -> None:
        """mmengine's, counting the images of an optimizer step: processes
        x batch x ``accumulative_counts`` (mmengine: processes x batch)."""
        if not (auto_scale_lr or {}).get('enable', False):
            return
        images, batch, counts = step_images(self.train_dataloader,
                                            optim_wrapper, self.world_size)
        ratio = images / auto_scale_lr['base_batch_size']
        print_log(
            f'auto_scale_lr: lr x {ratio:g}, for {images} images an '
            f'optimizer step ({self.world_size} processes x batch {batch} x '
            f'{counts} accumulated) against base_batch_size '
            f'{auto_scale_lr["base_batch_size"]}', 'current')
        for group in param_groups(optim_wrapper):
            group['lr'] = group['lr'] * ratio

    def build_optim_wrapper(self, optim_wrapper):
        """mmengine's, via :func:`without_fused_sgd_under_loss_scaling`."""
        return super().build_optim_wrapper(
            without_fused_sgd_under_loss_scaling(optim_wrapper))

    @staticmethod
    def build_dataloader(dataloader, *args, **kwargs) -> DataLoader:
        """mmengine's (same arguments), via :mod:`.dataloader_options`."""
        if isinstance(dataloader, dict):
            dataloader = without_collate_scope(
                without_idle_persistent_workers(dataloader))
        return Runner.build_dataloader(dataloader, *args, **kwargs)

    def train(self) -> nn.Module:
        self._training = True  # the train loop's checks (not in val/test)
        return _then_leave(super().train())

    def val(self) -> dict:
        return _then_leave(super().val())

    def test(self) -> dict:
        return _then_leave(super().test())

    def register_default_hooks(self, hooks=None) -> None:
        """mmengine's, accepting None for any default hook name."""
        if hooks is not None:
            hooks = enabled_default_hooks(hooks)
        super().register_default_hooks(hooks)
