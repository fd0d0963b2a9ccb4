# Copyright (c) mocoplug contributors. All rights reserved.
"""A MoCo training step (forward, loss, backward, optimizer step, momentum
update) never makes the host wait for the device: checked on CPU by
watching every torch call the step makes.

On a GPU the host queues kernels ahead of the device; an operation that
needs a device value on the host (``.item()``, ``bool(t)``, a
data-dependent shape, a blocking copy) makes it wait until everything
queued before has run, every step. On CPU such calls cost nothing, so
instead :class:`HostSyncWatch` records the calls that would sync on a GPU:

- reading values on the host: ``item``, ``tolist``, ``numpy``, ``cpu``,
  ``bool()``, ``int()``, ``float()``, ``index()``;
- data-dependent shapes: ``nonzero``, ``argwhere``, ``unique``,
  ``masked_select``;
- host data sent to a device with a blocking copy: ``torch.tensor`` /
  ``torch.as_tensor`` with a ``device``, or a tensor built from host data
  in the step moved by ``.to()`` without ``non_blocking=True``;
- random numbers drawn on the host: ``torch.randperm`` / ``randint`` /
  ``rand`` / ``randn`` without a ``device`` (on a GPU they would then be
  copied to it).
"""
import os
import traceback
import weakref
from types import SimpleNamespace
from typing import List

import pytest
import torch
from mmengine.logging import MessageHub
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper
from mmpretrain.models.utils import batch_shuffle_ddp
from mmpretrain.structures import DataSample
from torch.overrides import TorchFunctionMode

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.models import MoCo, MoCoV3
from ...gloo import free_port, join_gloo_group, run_two_ranks

Tensor = torch.Tensor
READS = {
    Tensor.item, Tensor.tolist, Tensor.numpy, Tensor.cpu, Tensor.__bool__,
    Tensor.__int__, Tensor.__float__, Tensor.__index__, Tensor.nonzero,
    torch.nonzero, Tensor.argwhere, torch.argwhere, Tensor.unique,
    torch.unique, Tensor.masked_select, torch.masked_select
}
FROM_HOST = {torch.tensor, torch.as_tensor, torch.from_numpy}
RANDOM = {torch.randperm, torch.randint, torch.rand, torch.randn}


def caller() -> str:
    """file:line of the innermost frame outside torch and this file."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if '/torch/' not in frame.filename and \
                frame.filename != __file__:
            return f'{os.path.basename(frame.filename)}:{frame.lineno}'
    return '?'


class HostSyncWatch(TorchFunctionMode):
    """Records (does not raise) every call that would make the host wait
    for a GPU; see the module docstring."""

    def __init__(self):
        super().__init__()
        self.syncs: List[str] = []
        # tensors built from host data in the step, by id (tensors do not
        # hash by value); an entry leaves when its tensor is freed
        self._host_data = weakref.WeakValueDictionary()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, '__name__', str(func))
        if func in READS:
            self.syncs.append(f'{name}: reads a device value on the host '
                              f'({caller()})')
        elif func in FROM_HOST and kwargs.get('device') is not None:
            self.syncs.append(f'{name}(..., device=...): a blocking copy '
                              f'({caller()})')
        elif func in RANDOM and kwargs.get('device') is None:
            self.syncs.append(f'{name} without device: drawn on the host '
                              f'({caller()})')
        elif func is Tensor.to and args and \
                self._host_data.get(id(args[0])) is args[0]:
            if kwargs.get('non_blocking', False):
                # on the device from now on (on CPU: the same tensor)
                del self._host_data[id(args[0])]
            else:
                self.syncs.append('host data sent to the device by a '
                                  f'blocking .to() ({caller()})')
        out = func(*args, **kwargs)
        if func in FROM_HOST and isinstance(out, Tensor):
            self._host_data[id(out)] = out
        return out


def samples(ids):
    return [DataSample(metainfo=dict(sample_idx=int(i))) for i in ids]


def build(version: str, shuffle_bn: str):
    torch.manual_seed(0)
    queue = dict(
        type='NegativeKeyQueue', size=48, dim=16, exclude_same_instance=True)
    common = dict(
        backbone=dict(type='SmallConvNet', channels=(8, 16), pool_after=(0, )),
        head=dict(type='InfoNCEHead', temperature=0.2),
        queue=queue)
    if version == 'v3':
        mlp = dict(
            type='MoCoProjectionNeck',
            hid_channels=32,
            out_channels=16,
            with_bias=False,
            with_bn=True)
        model = MoCoV3(
            neck=dict(mlp, in_channels=16, with_last_bn=True),
            predictor=dict(mlp, in_channels=16, with_avg_pool=False),
            **common)
    else:
        model = MoCo(
            neck=dict(
                type='MoCoProjectionNeck',
                in_channels=16,
                hid_channels=32,
                out_channels=16),
            shuffle_bn=shuffle_bn,
            num_splits=2,
            **common)
    model.init_weights()
    return model


def watched_steps(version: str,
                  shuffle_bn: str,
                  rank: int = 0,
                  world_size: int = 1) -> List[str]:
    """Two training steps after the data preprocessor (mmengine's
    ``train_step`` minus it), under :class:`HostSyncWatch`."""
    model = build(version, shuffle_bn)
    wrapped = model
    if world_size > 1:
        wrapped = MMDistributedDataParallel(model, broadcast_buffers=False)
    optim_wrapper = OptimWrapper(
        torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
                        lr=0.1,
                        momentum=0.9))
    hook = MomentumUpdateHook(momentum=0.99)
    runner = SimpleNamespace(
        model=wrapped,
        optim_wrapper=optim_wrapper,
        iter=0,
        max_iters=10,
        message_hub=MessageHub.get_current_instance())
    hook.before_train(runner)
    gen = torch.Generator().manual_seed(rank)
    batches = [[torch.randn(4, 3, 8, 8, generator=gen) for _ in range(2)]
               for _ in range(2)]
    watch = HostSyncWatch()
    with watch:
        for step, views in enumerate(batches):
            losses = wrapped(
                views, samples(range(4 * step, 4 * step + 4)), mode='loss')
            loss, _ = model.parse_losses(losses)
            optim_wrapper.update_params(loss)
            runner.iter = step
            hook.after_train_iter(runner, step)
    # it did train: 2 steps of 4 images per rank (both views for v3)
    enqueued = 2 * 4 * world_size * (2 if version == 'v3' else 1)
    model.queue()  # writes the last step's keys
    assert int(model.queue.ptr) == enqueued
    return watch.syncs


def test_the_watch_sees_host_syncs():
    """The check is not vacuous: what the watch must catch, it catches."""
    x = torch.randn(4)
    with HostSyncWatch() as watch:
        x.sum().item()
        bool(x[0] > 0)
        torch.tensor([1, 2], device=x.device)
        torch.tensor([1, 2]).to(x.device)
        torch.tensor([1, 2]).to(x.device, non_blocking=True)  # fine
        torch.randperm(4)
        torch.randperm(4, device=x.device)  # fine
    assert len(watch.syncs) == 5, watch.syncs


@pytest.mark.parametrize('version,shuffle_bn', [('v2', 'split'), ('v3', None)])
def test_one_process_makes_no_host_sync(version, shuffle_bn):
    """Split Shuffle BN (v2), the instance ids of the queue's
    same-instance mask (v2, v3)."""
    assert watched_steps(version, shuffle_bn) == []


def _worker(rank: int, port: int, version: str, out_dir: str):
    import torch.distributed as dist
    join_gloo_group(rank, port)
    syncs = watched_steps(version, 'ddp', rank, world_size=2)
    # mmpretrain's Shuffle BN, for contrast: a host draw and host copies
    images = torch.randn(4, 3, 8, 8)
    with HostSyncWatch() as watch:
        batch_shuffle_ddp(images)
    torch.save(
        dict(syncs=syncs, mmpretrain=watch.syncs),
        os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


@pytest.mark.parametrize('version', ['v2', 'v3'])
def test_two_ranks_make_no_host_sync(version, tmp_path):
    """Shuffle BN across ranks (v2), the gathered keys and ids (v2,
    v3)."""
    run_two_ranks(_worker, free_port(), version, str(tmp_path))
    for rank in range(2):
        result = torch.load(tmp_path / f'{rank}.pth')
        assert result['syncs'] == [], rank
    # rank 0 draws mmpretrain's permutation on the host
    assert torch.load(tmp_path / '0.pth')['mmpretrain'] == [
        'randperm without device: drawn on the host (batch_shuffle.py:28)'
    ]
