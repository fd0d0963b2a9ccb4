# Copyright (c) mocoplug contributors. All rights reserved.
import os

import pytest
import torch
from mmengine.runner import Runner
from torch.utils.data import DataLoader, Dataset

from mocoplug.detection import DetectionPreciseBNHook, precise_bn_stats
from mocoplug.detection.precise_bn_hook import min_across_processes
from ..gloo import free_port, join_gloo_group, run_two_ranks
from ..models.utils.test_precise_bn import BNModel
from .conftest import unique_name


class ConstantImages(Dataset):
    """Image i has value ``(c + 1) * (1 + i % 2)`` in channel c."""

    def __init__(self, length=8):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        value = torch.arange(1., 4.) * (1 + i % 2)
        return dict(inputs=value.view(3, 1, 1).expand(3, 2, 2).clone())


def _two_ranks_worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist
    join_gloo_group(rank, port)
    model = BNModel().train()
    # rank r sees (r + 1) * (c + 1) in channel c, and has 2 + r batches
    value = (rank + 1) * torch.arange(1., 4.).view(1, 3, 1, 1)
    batches = [dict(inputs=value.expand(2, 3, 2, 2).clone())] * (2 + rank)
    num_iters = min_across_processes(len(batches), torch.device('cpu'))
    count = precise_bn_stats(model, iter(batches), num_iters)
    torch.save(
        dict(
            count=count, mean=model.bn.running_mean, var=model.bn.running_var),
        os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


def test_statistics_are_averaged_across_processes(tmp_path):
    """Both ranks run as many batches (the fewest any rank has, so that a
    SyncBN forward never waits for a missing rank) and end with the same
    statistics, the mean of the ranks' (1.5 * (c + 1))."""
    run_two_ranks(_two_ranks_worker, free_port(), str(tmp_path))
    for rank in range(2):
        out = torch.load(tmp_path / f'{rank}.pth')
        assert out['count'] == 2
        assert torch.allclose(out['mean'], 1.5 * torch.arange(1., 4.))
        assert torch.allclose(out['var'], torch.zeros(3))


def _runner(tmp_path, hook, length=8, **train_cfg):
    # (one batch per epoch; an iteration loop waits 2 s at each epoch end)
    loader = DataLoader(ConstantImages(length), batch_size=8, shuffle=False)
    return Runner(
        model=BNModel(),
        work_dir=str(tmp_path),
        train_dataloader=loader,
        train_cfg=train_cfg,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.)),
        custom_hooks=[hook],
        default_hooks=dict(checkpoint=None, logger=None),
        experiment_name=unique_name('precise_bn'),
        log_level='WARNING')


def test_hook_replaces_moving_averages_at_the_end(tmp_path):
    """After 1 iteration a moving average (momentum 0.1) has gone 10% of
    the way; precise BN sets the statistics of the data: in channel c, 16
    values v = c + 1 and 16 values 2v, mean 1.5v, unbiased var 8v^2/31."""
    hook = DetectionPreciseBNHook(num_iters=4)
    runner = _runner(tmp_path, hook, by_epoch=False, max_iters=1)
    runner.train()
    assert hook._calls == 1
    bn = runner.model.bn
    v = torch.arange(1., 4.)
    # sums of small integers are exact in float32; the means and the final
    # division by 31 round once or twice (<= 2 u, within rtol=1e-5)
    assert torch.allclose(bn.running_mean, 1.5 * v)
    assert torch.allclose(bn.running_var, 8 * v**2 / 31)


def test_hook_runs_every_interval_and_at_the_end(tmp_path):
    hook = DetectionPreciseBNHook(num_iters=1, interval=2)
    _runner(
        tmp_path / 'iters', hook, length=64, by_epoch=False,
        max_iters=5).train()
    assert hook._calls == 3  # after iterations 2, 4 and the last (5)
    hook = DetectionPreciseBNHook(num_iters=1, interval=1)
    _runner(tmp_path / 'epochs', hook, by_epoch=True, max_epochs=2).train()
    assert hook._calls == 2
    hook = DetectionPreciseBNHook(num_iters=1)
    _runner(tmp_path / 'end', hook, by_epoch=True, max_epochs=3).train()
    assert hook._calls == 1


@pytest.mark.parametrize('kwargs', [dict(num_iters=0), dict(interval=-1)])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DetectionPreciseBNHook(**kwargs)
