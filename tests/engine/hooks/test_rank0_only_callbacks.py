# Copyright (c) mocoplug contributors. All rights reserved.
"""No collective in a callback mmengine runs on one rank: ``Runner.
save_checkpoint`` is ``@master_only`` (a best-checkpoint save, a second
CheckpointHook), so every hook's ``before_save_checkpoint`` runs on rank 0
alone and a collective there waits for ranks that never join."""
import os.path as osp

import torch.distributed as dist
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS

from mocoplug.registry import HOOKS
from ...gloo import free_port, run_two_ranks, torchrun_env

# callbacks mmengine 0.10.7 calls inside a @master_only method
RANK0_ONLY = ('before_save_checkpoint', )
COLLECTIVES = ('all_reduce', 'all_gather', 'broadcast', 'reduce', 'gather',
               'scatter', 'barrier', 'all_gather_object', 'gather_object',
               'broadcast_object_list', 'all_gather_into_tensor',
               'reduce_scatter')
DEFAULT_HOOKS = dict(
    exact_resume=dict(type='ExactResumeHook'),
    representation_health=dict(type='RepresentationHealthHook', interval=1),
    non_finite_loss=dict(type='NonFiniteLossHook'),
    moco_config_check=dict(type='MoCoConfigCheckHook'),
    queue_refill=dict(type='QueueRefillHook'))


def overriders():
    """mocoplug's registered hooks that define a rank-0-only callback."""
    return sorted(name for name, cls in HOOKS.module_dict.items()
                  if issubclass(cls, Hook) and any(
                      getattr(cls, m) is not getattr(Hook, m)
                      for m in RANK0_ONLY))


def _refuse(name):

    def collective(*args, **kwargs):
        raise AssertionError(f'torch.distributed.{name} in a rank-0-only '
                             'callback')

    return collective


def _train_then_save_on_rank0(rank: int, port: int, cfg: dict) -> None:
    torchrun_env(rank, port)
    runner = RUNNERS.build(Config(cfg))
    runner.train()
    names = {type(h).__name__ for h in runner.hooks}
    assert set(overriders()) <= names, set(overriders()) - names
    saved = {n: getattr(dist, n) for n in COLLECTIVES if hasattr(dist, n)}
    if rank == 0:
        for name in saved:
            setattr(dist, name, _refuse(name))
    try:  # what CheckpointHook's save_best path calls: rank 0 saves alone
        runner.save_checkpoint(runner.work_dir, 'best_loss_iter_2.pth')
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
    dist.barrier()
    dist.destroy_process_group()


def test_rank0_only_callbacks_use_no_collective(tiny_moco_runner_cfg,
                                                tmp_path):
    # the snapshot and the weights check of a due save are on every rank;
    # this save is one no CheckpointHook announced (iteration 2 of 3)
    cfg = tiny_moco_runner_cfg(tmp_path, max_iters=2)
    cfg.default_hooks.update(DEFAULT_HOOKS)
    cfg.default_hooks.checkpoint.interval = 5
    cfg.update(
        runner_type='mocoplug.MoCoRunner',
        launcher='pytorch',
        env_cfg=dict(dist_cfg=dict(backend='gloo', timeout=60)))
    assert overriders() == ['ExactResumeHook', 'NonFiniteLossHook']
    run_two_ranks(_train_then_save_on_rank0, free_port(), cfg.to_dict())
    assert osp.isfile(tmp_path / 'best_loss_iter_2.pth')
