# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCoRunner: what mocoplug's configs mean, applied by the runner their
``runner_type`` names (so that every tool calling ``RUNNERS.build(cfg)``
gives them the same meaning)."""
import atexit
import copy
import glob
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import RUNNERS, DefaultScope
from mmengine.runner import Runner
from mmengine.visualization import Visualizer
from PIL import Image

from mocoplug.engine.runner import MoCoRunner, cpu_distributed, moco_runner
from mocoplug.engine.runner.cpu_distributed import (cpu_model_wrapper_cfg,
                                                    dist_cfg_for_this_machine)
from mocoplug.engine.runner.dataloader_options import (
    without_collate_scope, without_idle_persistent_workers)
from mocoplug.engine.runner.moco_runner import (
    deterministic_cublas, without_buffer_broadcast,
    without_fused_sgd_under_loss_scaling)
from mocoplug.utils import leave_process_group, process_group
from ...conftest import unique_experiment_name
from ...gloo import free_port, join_gloo_group, run_two_ranks
from ...models.algorithms.test_no_host_sync import build as build_moco

ROOT = osp.dirname(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
CONFIGS = osp.join(ROOT, 'configs')
DIGITS = osp.join(
    CONFIGS, 'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
LINEAR_FOLDER = osp.join(CONFIGS, 'benchmarks',
                         'linear_r50_8xb32-steplr-100e_folder.py')
VOC_C4 = osp.join(CONFIGS, 'detection',
                  'faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py')
SHIPPED = sorted(
    p for p in glob.glob(osp.join(CONFIGS, '**', '*.py'), recursive=True)
    if '_base_' not in p)


@pytest.mark.parametrize(
    'path', SHIPPED, ids=lambda p: osp.relpath(p, CONFIGS))
def test_every_shipped_config_names_the_runner(path):
    assert Config.fromfile(path).runner_type == 'mocoplug.MoCoRunner'


@pytest.mark.parametrize('scope',
                         ['mmengine', 'mmpretrain', 'mmdet', 'mocoplug'])
def test_runner_type_resolves_from_any_default_scope(scope):
    """As mmengine's build_runner_from_cfg looks it up: in the registry of
    the current default scope, with the scope-qualified name."""
    with DefaultScope.overwrite_default_scope(scope), \
            RUNNERS.switch_scope_and_registry(None) as registry:
        assert registry.scope == scope
        assert registry.get('mocoplug.MoCoRunner') is MoCoRunner


def test_runner_type_resolves_in_a_fresh_process():
    """What mmpretrain's and mmdet's tools/train.py do: read the config
    (its custom_imports import mocoplug) and build the runner before any
    default scope exists."""
    script = ('import sys\n'
              'from mmengine.config import Config\n'
              'from mmengine.registry import RUNNERS, DefaultScope\n'
              'for path in sys.argv[1:]:\n'
              '    cfg = Config.fromfile(path)\n'
              '    assert DefaultScope.get_current_instance() is None\n'
              '    with RUNNERS.switch_scope_and_registry(None) as registry:\n'
              '        cls = registry.get(cfg.runner_type)\n'
              '    print(cls.__module__ + "." + cls.__name__)\n')
    out = subprocess.run([sys.executable, '-c', script, DIGITS, VOC_C4],
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split(
    ) == ['mocoplug.engine.runner.moco_runner.MoCoRunner'] * 2


def make_labelled_folder(root, classes=('a', 'b')):
    for split in ('train', 'val'):
        for cls in classes:
            os.makedirs(root / split / cls)
            Image.new('RGB', (8, 8)).save(root / split / cls / '0.png')
    return str(root)


def test_from_cfg_gives_pretrained_and_data_root_their_meaning(
        monkeypatch, tmp_path):
    built = []
    monkeypatch.setattr(
        Runner, 'from_cfg',
        classmethod(lambda cls, cfg: built.append((cls, cfg)) or 'runner'))
    folder = make_labelled_folder(tmp_path)
    cfg = Config.fromfile(LINEAR_FOLDER)
    cfg.merge_from_dict(dict(pretrained='moco.pth', data_root=folder))
    assert MoCoRunner.from_cfg(cfg) == 'runner'
    (cls, applied), = built
    assert cls is MoCoRunner
    assert applied.model.backbone.init_cfg.checkpoint == 'moco.pth'
    assert applied.model.head.num_classes == 2  # the class folders
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        assert applied[loader].dataset.data_root == folder
    # the caller's config is left as it was
    assert cfg.model.backbone.init_cfg.checkpoint is None
    assert cfg.train_dataloader.dataset.data_root is None


def test_none_switches_off_any_default_hook():
    """mmengine 0.10.7 asserts on ``default_hooks.NAME=None`` for names
    that are not its own; the runner leaves those hooks out (mmengine's
    own names still reach mmengine)."""
    Visualizer.get_instance(unique_experiment_name('none_hooks'))
    hooks = Config.fromfile(DIGITS).default_hooks
    hooks.update(
        exact_resume=None, representation_health=None, checkpoint=None)
    runner = MoCoRunner.__new__(MoCoRunner)
    runner._hooks = []
    with DefaultScope.overwrite_default_scope('mocoplug'):
        runner.register_default_hooks(hooks)
    names = {type(h).__name__ for h in runner.hooks}
    assert names == {
        'RuntimeInfoHook', 'IterTimerHook', 'DistSamplerSeedHook',
        'LoggerHook', 'ParamSchedulerHook', 'VisualizationHook',
        'NonFiniteLossHook', 'MoCoConfigCheckHook', 'QueueRefillHook'
    }
    # mmengine's Runner refuses the same config
    with pytest.raises(AssertionError):
        Runner.__new__(Runner).register_default_hooks(dict(exact_resume=None))


def test_a_dataloader_without_workers_ignores_persistent_workers():
    """mmpretrain's tools/train.py sets persistent_workers=True on every
    dataloader; torch refuses it without workers."""
    loader = dict(
        dataset=dict(type='ToyTensorDataset', size=4),
        sampler=dict(type='DefaultSampler', shuffle=False),
        batch_size=2,
        num_workers=0,
        persistent_workers=True,
        collate_fn=dict(type='default_collate'))
    with DefaultScope.overwrite_default_scope('mocoplug'):
        with pytest.raises(ValueError, match='persistent_workers'):
            Runner.build_dataloader(copy.deepcopy(loader))
        built = MoCoRunner.build_dataloader(loader)
    assert built.persistent_workers is False and len(built) == 2
    assert loader['persistent_workers'] is True  # not changed in place
    with_workers = dict(num_workers=2, persistent_workers=True)
    assert without_idle_persistent_workers(with_workers) is with_workers


def test_a_config_inherited_through_mocoplug_builds_its_dataloader(tmp_path):
    """A user's config that inherits a shipped one as ``mocoplug::...``
    resolves it from the imported package (an editable install included)
    and gets a dataloader: mmengine tags the inherited ``collate_fn`` with
    ``_scope_``, which plain mmengine passes to the function."""
    user_cfg = tmp_path / 'my_digits.py'
    user_cfg.write_text(
        "_base_ = 'mocoplug::mocov2/"
        "mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py'\n")
    cfg = Config.fromfile(str(user_cfg))
    loader = cfg.train_dataloader.to_dict()
    assert loader['collate_fn'] == dict(
        type='default_collate', _scope_='mocoplug')
    with DefaultScope.overwrite_default_scope('mocoplug'):
        with pytest.raises(TypeError, match='_scope_'):
            next(iter(Runner.build_dataloader(copy.deepcopy(loader))))
        batch = next(iter(MoCoRunner.build_dataloader(loader)))
    views = batch['inputs']
    assert len(views) == 2 and views[0].shape[0] == loader['batch_size']
    assert without_collate_scope(
        dict(collate_fn=dict(type='default_collate'))) == dict(
            collate_fn=dict(type='default_collate'))


@pytest.mark.parametrize('machine, given, expected',
                         [('cpu', None, 'gloo'), ('cpu', 'nccl', 'gloo'),
                          ('cpu', 'gloo', 'gloo'), ('cpu', 'mpi', 'mpi'),
                          ('cuda', None, 'nccl'), ('cuda', 'nccl', 'nccl'),
                          ('cuda', 'gloo', 'gloo')])
def test_the_backend_follows_the_machine(monkeypatch, machine, given,
                                         expected):
    """gloo without a GPU, the config's backend (nccl by default) with
    one: the digits config no longer needs to force gloo."""
    monkeypatch.setattr(cpu_distributed, 'get_device', lambda: machine)
    dist_cfg = None if given is None else dict(backend=given, timeout=60)
    chosen = dist_cfg_for_this_machine(dist_cfg)
    assert chosen['backend'] == expected
    if given is not None:
        assert chosen['timeout'] == 60
        assert dist_cfg['backend'] == given  # not changed in place
    assert Config.fromfile(DIGITS).env_cfg.dist_cfg == dict(backend='nccl')


def test_cpu_model_wrapper_config():
    """mmengine's GPU wrapping, with device_ids=None for DDP (how torch's
    DDP takes CPU modules); no buffer broadcast by default, or DDP would
    send MoCo's K x C queue from rank 0 at each forward."""
    assert cpu_model_wrapper_cfg(None) == dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=False,
        device_ids=None)
    assert cpu_model_wrapper_cfg(None, True)['find_unused_parameters']
    assert cpu_model_wrapper_cfg(dict(broadcast_buffers=True)) == dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=True,
        device_ids=None)
    # not a DDP: nothing to add
    fsdp = dict(type='MMFullyShardedDataParallel')
    assert cpu_model_wrapper_cfg(fsdp) == fsdp


def test_the_group_is_left_at_exit_only_after_a_run_that_succeeded(
        monkeypatch):
    registered = []
    monkeypatch.setattr(process_group, '_REGISTERED', False)
    monkeypatch.setattr(atexit, 'register', registered.append)

    def fail(self):
        raise RuntimeError('a rank failed')

    runner = MoCoRunner.__new__(MoCoRunner)
    monkeypatch.setattr(Runner, 'train', fail)
    with pytest.raises(RuntimeError):
        runner.train()
    assert registered == []  # a failed rank exits at once, no barrier
    monkeypatch.setattr(Runner, 'train', lambda self: 'model')
    monkeypatch.setattr(Runner, 'test', lambda self: dict(top1=1.))
    monkeypatch.setattr(Runner, 'val', lambda self: dict(top1=2.))
    assert runner.train() == 'model'
    assert runner.val() == dict(top1=2.)
    assert runner.test() == dict(top1=1.)
    assert registered == [leave_process_group]  # once


def _record_group_at_exit(out_dir: str, rank: int) -> None:
    with open(osp.join(out_dir, f'exit_{rank}.json'), 'w') as f:
        json.dump(dict(alive=dist.is_initialized()), f)


def _train_on_two_cpu_ranks(rank: int, port: int, out_dir: str,
                            cfg: dict) -> None:
    join_gloo_group(rank, port)
    os.environ['LOCAL_RANK'] = str(rank)  # as torchrun sets it
    # registered first, so it runs after the runner's handler (LIFO)
    atexit.register(_record_group_at_exit, out_dir, rank)
    runner = MoCoRunner.from_cfg(Config(cfg))
    runner.train()
    total = torch.tensor([rank + 1.])
    dist.all_reduce(total)  # the group still works after train()
    with open(osp.join(out_dir, f'run_{rank}.json'), 'w') as f:
        json.dump(
            dict(
                wrapper=type(runner.model).__name__,
                device_ids=runner.model.device_ids,
                broadcast_buffers=runner.model.broadcast_buffers,
                total=total.item(),
                weight=runner.model.module.linear.weight.tolist()), f)


def test_two_cpu_ranks_train_then_leave_the_group_at_exit(
        tmp_path, tiny_runner_cfg):
    """A distributed run without a GPU: DDP over CPU modules (mmengine
    would give it device_ids=[LOCAL_RANK]), the group still usable after
    train() (a script may test() next), and gone when the process exits."""
    cfg = tiny_runner_cfg(tmp_path / 'work', max_iters=2, launcher='pytorch')
    cfg.env_cfg = dict(dist_cfg=dict(backend='nccl'))  # as mmpretrain's
    mp.spawn(
        _train_on_two_cpu_ranks,
        args=(free_port(), str(tmp_path), cfg.to_dict()),
        nprocs=2)
    runs = [
        json.loads((tmp_path / f'run_{r}.json').read_text()) for r in (0, 1)
    ]
    for run in runs:
        assert run['wrapper'] == 'MMDistributedDataParallel'
        assert run['device_ids'] is None
        assert run['broadcast_buffers'] is False
        assert run['total'] == 3.  # 1 + 2
    assert runs[0]['weight'] == runs[1]['weight']  # DDP kept them equal
    for rank in (0, 1):
        exit_state = json.loads((tmp_path / f'exit_{rank}.json').read_text())
        assert exit_state == dict(alive=False)


def _wrap_moco_on_two_cpu_ranks(rank: int, port: int, out_dir: str,
                                wrapper_cfg: dict) -> None:
    join_gloo_group(rank, port)
    os.environ['LOCAL_RANK'] = str(rank)
    runner = MoCoRunner.__new__(MoCoRunner)
    runner._distributed, runner.cfg = True, Config(dict())
    model = build_moco('v2', 'split')
    wrapped = runner.wrap_model(copy.deepcopy(wrapper_cfg), model)
    # this rank's own queue and BN statistics, then a forward through DDP
    key_bn = next(m for m in model.momentum_encoder.modules()
                  if isinstance(m, nn.modules.batchnorm._BatchNorm))
    model.queue.keys.fill_(rank)
    key_bn.running_mean.fill_(rank)  # (the key encoder runs no forward)
    wrapped(torch.zeros(2, 3, 16, 16), mode='tensor')
    with open(osp.join(out_dir, f'{rank}.json'), 'w') as f:
        json.dump(
            dict(
                broadcast_buffers=wrapped.broadcast_buffers,
                keys=model.queue.keys.unique().tolist(),
                bn=key_bn.running_mean.unique().tolist()), f)
    with pytest.raises(ValueError, match='broadcast_buffers=True'):
        runner.wrap_model(
            dict(broadcast_buffers=True), build_moco('v2', 'split'))
    dist.destroy_process_group()


def test_a_momentum_model_is_wrapped_without_buffer_broadcast(tmp_path):
    """A wrapper config without broadcast_buffers (torch's default: True):
    each rank keeps its own queue and momentum encoder statistics through
    a DDP forward; asking for True is refused."""
    run_two_ranks(_wrap_moco_on_two_cpu_ranks, free_port(), str(tmp_path),
                  dict(type='MMDistributedDataParallel'))
    for rank in (0, 1):
        run = json.loads((tmp_path / f'{rank}.json').read_text())
        assert run == dict(
            broadcast_buffers=False, keys=[float(rank)], bn=[float(rank)])


def test_fused_sgd_becomes_foreach_under_loss_scaling():
    cfg = dict(
        type='AmpOptimWrapper',
        loss_scale='dynamic',
        optimizer=dict(type='SGD', lr=0.1, momentum=0.9, fused=True))
    plain = dict(cfg, type='OptimWrapper')
    assert without_fused_sgd_under_loss_scaling(plain) is plain
    fixed = without_fused_sgd_under_loss_scaling(cfg)
    assert cfg['optimizer']['fused'] is True  # the config is not changed
    assert fixed['optimizer'] == dict(
        type='SGD', lr=0.1, momentum=0.9, fused=False, foreach=True)

    # what it buys: a step the scaler skips (an inf gradient) leaves the
    # optimizer as it was, so the next step is plain SGD's first step
    def two_steps(**kwargs):
        param = torch.nn.Parameter(torch.linspace(-1, 1, 6))
        opt = torch.optim.SGD([param], lr=0.1, momentum=0.9, **kwargs)
        scaler = torch.amp.GradScaler('cpu', init_scale=2.**16)
        for grad_scale in (float('inf'), 1.0):
            opt.zero_grad()
            loss = (param * torch.arange(6.) * grad_scale).sum()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if grad_scale != 1.0:
                assert opt.state[param] == {}
        return param.detach()

    kwargs = {
        k: v
        for k, v in fixed['optimizer'].items() if k in ('fused', 'foreach')
    }
    # SGD's first step with momentum: p - lr * grad, as add(alpha=) rounds it
    first_step = torch.linspace(-1, 1, 6).add(torch.arange(6.), alpha=-0.1)
    assert torch.equal(two_steps(**kwargs), first_step)
    assert torch.equal(two_steps(foreach=False), first_step)


def test_wrappers_and_strategies_a_momentum_model_cannot_train_under():
    """FSDP shards and flattens the parameters the momentum update pairs
    (third-party errors before); ``strategy`` is read by FlexibleRunner
    only (silently plain DDP before); a user's DDP config keeps the
    config's top-level find_unused_parameters (MoCo v3 ViT: DDP failed at
    step 2 on 2 ranks without it)."""
    moco = build_moco('v2', 'split')
    with pytest.raises(ValueError, match='MMFullyShardedDataParallel.*FSDP'):
        without_buffer_broadcast(dict(type='MMFullyShardedDataParallel'), moco)
    kept = without_buffer_broadcast(
        dict(type='MMDistributedDataParallel'), moco, find_unused=True)
    assert kept == dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=True)
    users = dict(
        type='MMDistributedDataParallel', find_unused_parameters=False)
    assert without_buffer_broadcast(
        users, moco, find_unused=True
    )['find_unused_parameters'] is False  # theirs, when they set it
    cfg = Config.fromfile(DIGITS)
    cfg.strategy = dict(type='FSDPStrategy')
    with pytest.raises(
            ValueError,
            match="strategy=.*FSDPStrategy.*is read "
            "by mmengine's FlexibleRunner only"):
        MoCoRunner.from_cfg(cfg)


def test_flexible_runner_is_refused_for_a_momentum_model(
        tmp_path, tiny_moco_runner_cfg):
    from mmengine.runner import FlexibleRunner
    cfg = tiny_moco_runner_cfg(tmp_path)
    cfg.default_hooks.moco_config_check = dict(type='MoCoConfigCheckHook')
    runner = FlexibleRunner.from_cfg(cfg)
    with pytest.raises(ValueError, match="runner_type='FlexibleRunner'"):
        runner.train()
    assert runner.iter == 0


def test_deterministic_cuda_runs_get_a_cublas_workspace(monkeypatch):
    """torch refuses cuBLAS GEMMs under deterministic algorithms without
    CUBLAS_WORKSPACE_CONFIG (our resume warning recommends deterministic)."""
    monkeypatch.delenv('CUBLAS_WORKSPACE_CONFIG', raising=False)
    deterministic_cublas(True, cuda=False)
    deterministic_cublas(False, cuda=True)
    assert 'CUBLAS_WORKSPACE_CONFIG' not in os.environ
    deterministic_cublas(True, cuda=True)
    assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':4096:8'
    monkeypatch.setenv('CUBLAS_WORKSPACE_CONFIG', ':16:8')
    deterministic_cublas(True, cuda=True)
    assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':16:8'  # the user's
    # MoCoRunner calls it where mmengine sets the randomness
    called = []
    monkeypatch.setattr(moco_runner, 'deterministic_cublas',
                        lambda *args: called.append(args))
    monkeypatch.setattr(Runner, 'set_randomness', lambda *a, **k: None)
    object.__new__(MoCoRunner).set_randomness(0, deterministic=True)
    assert called == [(True, torch.cuda.is_available())]


def test_auto_scale_lr_counts_the_images_of_an_optimizer_step(
        tmp_path, tiny_moco_runner_cfg):
    """README: lr 0.03 per 256 images of total batch; with accumulation an
    optimizer step sees processes x batch x accumulative_counts images."""
    from mocoplug.engine.hooks.runner_info import schedule_facts
    cfg = tiny_moco_runner_cfg(
        tmp_path, max_iters=2, auto_scale_lr=dict(base_batch_size=256))
    cfg.auto_scale_lr.enable = True
    cfg.optim_wrapper.accumulative_counts = 2
    runner = RUNNERS.build(dict(cfg, runner_type='mocoplug.MoCoRunner'))
    runner.train()
    lr, = {g['lr'] for g in runner.optim_wrapper.optimizer.param_groups}
    assert lr == 0.03 * (8 * 2 / 256)  # batch 8, 1 process, 2 accumulated
    assert schedule_facts(runner).startswith(
        'total batch 16 (8 a step x 2 accumulated), 0.5 epochs of 32 images')
