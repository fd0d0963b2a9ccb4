# Copyright (c) mocoplug contributors. All rights reserved.
import pytest
import torch
import torch.nn as nn

from mocoplug.models import SplitBatchNorm
from ..algorithms.test_no_host_sync import HostSyncWatch


def reference_split_bn(bn: nn.BatchNorm2d, x: torch.Tensor, splits: int):
    """Slice g = samples g, g + splits, ...; each slice through its own copy
    of a plain BatchNorm2d, running statistics averaged over the copies."""
    out = torch.empty_like(x)
    means, vars_ = [], []
    for g in range(splits):
        copy = nn.BatchNorm2d(bn.num_features, momentum=bn.momentum)
        copy = copy.to(x.dtype)
        copy.load_state_dict(bn.state_dict())
        out[g::splits] = copy(x[g::splits])
        means.append(copy.running_mean)
        vars_.append(copy.running_var)
    return out, torch.stack(means).mean(0), torch.stack(vars_).mean(0)


# float64: a slice's statistics sum at most 3 x 25 values of size <= 15, so
# either summation order is within 75 * 2^-53 * 15 < 1e-13 of the exact
# sums (worst case, any order or vector width); normalised outputs are
# O(1). 1e-10 leaves a margin of 1000 for the divisions and the square root.
# (In float32 the same worst case, 75 * 2^-24 * 15 = 7e-5, exceeds the
# old 1e-5 tolerance: it only held because round-off errors cancel.)
ATOL = 1e-10


@pytest.mark.parametrize('batch', [8, 10])  # even and uneven slices
def test_matches_one_batch_norm_per_slice(batch, on_device):
    torch.manual_seed(0)
    plain = nn.BatchNorm2d(3).double()
    nn.init.uniform_(plain.weight)
    nn.init.uniform_(plain.bias)
    split = SplitBatchNorm.convert(plain, num_splits=4)
    x = torch.randn(batch, 3, 5, 5, dtype=torch.float64) * 3 + 1
    ref_out, ref_mean, ref_var = reference_split_bn(plain, x, 4)
    out = split(x)
    assert torch.allclose(out, ref_out, rtol=0, atol=ATOL)
    assert torch.allclose(split.running_mean, ref_mean, rtol=0, atol=ATOL)
    assert torch.allclose(split.running_var, ref_var, rtol=0, atol=ATOL)
    assert int(split.num_batches_tracked) == 1


@pytest.mark.parametrize('momentum', [0.1, None])
def test_running_statistics_over_steps_without_host_reads(momentum, on_device):
    """Three steps; momentum None is nn.BatchNorm's cumulative average
    (weights 1, 1/2, 1/3), computed without reading a device value."""
    torch.manual_seed(0)
    plain = nn.BatchNorm2d(3, momentum=momentum).double()
    split = SplitBatchNorm.convert(plain, num_splits=4)
    for step in range(3):
        x = torch.randn(8, 3, 5, 5, dtype=torch.float64) * 3 + step
        _, ref_mean, ref_var = reference_split_bn(plain, x, 4)
        with HostSyncWatch() as watch:
            split(x)
        assert watch.syncs == []
        assert torch.allclose(split.running_mean, ref_mean, rtol=0, atol=ATOL)
        assert torch.allclose(split.running_var, ref_var, rtol=0, atol=ATOL)


def test_differs_from_whole_batch_norm_in_training(on_device):
    torch.manual_seed(0)
    x = torch.randn(8, 2, 3, 3)
    x[::2] += 5  # slice 0 is shifted, slice 1 is not
    whole = nn.BatchNorm2d(2)(x)
    split = SplitBatchNorm(2, num_splits=2)(x)
    assert not torch.allclose(whole, split, atol=1e-3)


def test_eval_mode_is_a_plain_batch_norm(on_device):
    plain = nn.BatchNorm2d(3)
    plain.running_mean.fill_(0.5)
    split = SplitBatchNorm(3, num_splits=4)
    split.load_state_dict(plain.state_dict())
    plain.eval()
    split.eval()
    x = torch.randn(6, 3, 4, 4)
    # the same kernel (eval batch_norm) on the same tensors: bit for bit
    assert torch.equal(plain(x), split(x))


def test_convert_shares_parameters_and_keeps_state_dict_keys():
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Sequential(nn.BatchNorm2d(4)), nn.BatchNorm1d(4))
    keys = list(model.state_dict())
    weight = model[1].weight
    SplitBatchNorm.convert(model, num_splits=2)
    assert type(model[1]) is SplitBatchNorm
    assert type(model[3][0]) is SplitBatchNorm
    assert type(model[4]) is SplitBatchNorm  # 1-D too (projection heads)
    assert model[1].weight is weight
    assert list(model.state_dict()) == keys


def test_one_dimensional_features_of_a_projection_head(on_device):
    torch.manual_seed(0)
    plain = nn.BatchNorm1d(5).double()
    split = SplitBatchNorm.convert(nn.BatchNorm1d(5).double(), num_splits=2)
    x = torch.randn(8, 5, dtype=torch.float64)
    expected = torch.empty_like(x)
    expected[0::2] = plain(x[0::2])
    expected[1::2] = nn.BatchNorm1d(5).double()(x[1::2])
    assert torch.allclose(split(x), expected, rtol=0, atol=ATOL)
    split.eval()
    assert split(x).shape == (8, 5)


def test_syncbn_is_left_alone():
    sync = nn.SyncBatchNorm(4)
    assert SplitBatchNorm.convert(sync, num_splits=2) is sync


def test_too_small_batch_is_refused_with_the_values_and_the_fix():
    with pytest.raises(ValueError) as error:
        SplitBatchNorm(2, num_splits=4)(torch.randn(3, 2, 2, 2))
    assert str(error.value) == (
        'SplitBatchNorm: batch 3 < num_splits 4: lower model.num_splits to a '
        'divisor of the per-process batch, or raise the batch size')


# Float64. The even split folds both layouts into the same contiguous batch
# and calls the same kernel on it, so the values are bitwise those of the
# contiguous path. The uneven split (each slice 2-3 samples x 25 positions,
# at most 75 values per channel) and eval mode (running statistics, an
# elementwise affine map) run BatchNorm's channels-last kernel, which may
# sum and round in another order: a sum of 75 values of size <= 10 differs
# by at most 75 * 1.1e-16 * 750 ~ 6e-12 between two orders, 1e-13 in a
# mean or variance, about as much in the O(1) outputs and gradients. 1e-12
# holds on any CPU and thread count; a wrong slice or statistic is O(1).
CHANNELS_LAST_ATOL = 1e-12


@pytest.mark.parametrize('batch', [8, 10])  # folded, and slice by slice
@pytest.mark.parametrize('training', [True, False])
def test_channels_last_stays_channels_last_with_the_same_values(
        batch, training):
    torch.manual_seed(0)
    bns = [SplitBatchNorm(3, num_splits=4).double() for _ in range(2)]
    for bn in bns:
        bn.weight.data.copy_(torch.tensor([0.5, 1.0, 2.0]))
        bn.bias.data.copy_(torch.tensor([0.1, -0.2, 0.3]))
        bn.running_var.fill_(2.0)
        bn.train(training)
    x = torch.randn(batch, 3, 5, 5, dtype=torch.float64) * 3 + 1
    grad_out = torch.randn_like(x)
    results = []
    for bn, layout in zip(bns, (torch.contiguous_format, torch.channels_last)):
        inp = x.clone(memory_format=layout).requires_grad_()
        out = bn(inp)
        # an in-place ReLU may follow, as in the backbones
        out = torch.nn.functional.relu(out, inplace=True)
        out.backward(grad_out.contiguous(memory_format=layout))
        # output and input gradient in the input's format
        assert out.is_contiguous(memory_format=layout)
        assert inp.grad.is_contiguous(memory_format=layout)
        results.append(
            (out, inp.grad, bn.weight.grad, bn.running_mean, bn.running_var))
    assert not results[1][0].is_contiguous()  # really channels-last
    for contiguous, channels_last in zip(*results):
        if training and batch == 8:
            assert torch.equal(contiguous, channels_last)
        else:
            assert torch.allclose(
                contiguous, channels_last, rtol=0, atol=CHANNELS_LAST_ATOL)
