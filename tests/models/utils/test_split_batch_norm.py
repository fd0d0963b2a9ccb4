# Copyright (c) mocoplug contributors. All rights reserved.
import pytest
import torch
import torch.nn as nn

from mocoplug.models import SplitBatchNorm


def reference_split_bn(bn: nn.BatchNorm2d, x: torch.Tensor, splits: int):
    """Slice g = samples g, g + splits, ...; each slice through its own copy
    of a plain BatchNorm2d, running statistics averaged over the copies."""
    out = torch.empty_like(x)
    means, vars_ = [], []
    for g in range(splits):
        copy = nn.BatchNorm2d(bn.num_features)
        copy.load_state_dict(bn.state_dict())
        out[g::splits] = copy(x[g::splits])
        means.append(copy.running_mean)
        vars_.append(copy.running_var)
    return out, torch.stack(means).mean(0), torch.stack(vars_).mean(0)


@pytest.mark.parametrize('batch', [8, 10])  # even and uneven slices
def test_matches_one_batch_norm_per_slice(batch, on_device):
    torch.manual_seed(0)
    plain = nn.BatchNorm2d(3)
    nn.init.uniform_(plain.weight)
    nn.init.uniform_(plain.bias)
    split = SplitBatchNorm.convert(plain, num_splits=4)
    x = torch.randn(batch, 3, 5, 5) * 3 + 1
    ref_out, ref_mean, ref_var = reference_split_bn(plain, x, 4)
    out = split(x)
    assert torch.allclose(out, ref_out, atol=1e-5)
    assert torch.allclose(split.running_mean, ref_mean, atol=1e-6)
    assert torch.allclose(split.running_var, ref_var, atol=1e-5)
    assert int(split.num_batches_tracked) == 1


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
    assert torch.allclose(plain(x), split(x))


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
    plain = nn.BatchNorm1d(5)
    split = SplitBatchNorm.convert(nn.BatchNorm1d(5), num_splits=2)
    x = torch.randn(8, 5)
    expected = torch.empty_like(x)
    expected[0::2] = plain(x[0::2])
    expected[1::2] = nn.BatchNorm1d(5)(x[1::2])
    assert torch.allclose(split(x), expected, atol=1e-5)
    split.eval()
    assert split(x).shape == (8, 5)


def test_syncbn_is_left_alone():
    sync = nn.SyncBatchNorm(4)
    assert SplitBatchNorm.convert(sync, num_splits=2) is sync


def test_too_small_batch_is_refused():
    with pytest.raises(ValueError, match='num_splits'):
        SplitBatchNorm(2, num_splits=4)(torch.randn(3, 2, 2, 2))
