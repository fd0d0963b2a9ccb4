# Copyright (c) mocoplug contributors. All rights reserved.
import pytest
import torch
import torch.nn as nn
from mmpretrain.models.necks import LinearNeck, MoCoV2Neck, NonLinearNeck

from mocoplug.models import MoCoProjectionNeck

# float64 on both sides. Worst case, in any summation order or vector width
# (Higham's gamma_n): an output is within (49 + 2 x 2048) 2^-53 S of the
# exact value, S the sum of |terms| (<= 430 for these inputs): < 2e-10; the
# BN layers rescale to O(1). The same bound in float32 is 0.1: the old
# atol=1e-6 held only because round-off errors cancel.
ATOL = 1e-9


def layer_types(neck):
    return [type(m).__name__ for m in neck.mlp]


def test_v1_is_one_linear_layer_like_mmpretrain_linear_neck():
    neck = MoCoProjectionNeck(2048, 2048, 128, num_layers=1).double()
    assert layer_types(neck) == ['Linear']
    ref = LinearNeck(2048, 128, gap_dim=2, norm_cfg=None).double()
    ref.fc.load_state_dict(neck.mlp[0].state_dict())
    x = (torch.randn(2, 2048, 7, 7, dtype=torch.float64), )
    assert torch.allclose(neck(x)[0], ref(x)[0], rtol=0, atol=ATOL)


def test_v2_matches_mmpretrain_mocov2_neck_with_the_same_state_dict():
    neck = MoCoProjectionNeck(2048, 2048, 128).double()
    assert layer_types(neck) == ['Linear', 'ReLU', 'Linear']
    ref = MoCoV2Neck(2048, 2048, 128).double()
    ref.load_state_dict(neck.state_dict())  # same key names: mlp.0, mlp.2
    x = (torch.randn(2, 2048, 7, 7, dtype=torch.float64), )
    assert neck(x)[0].shape == (2, 128)
    assert torch.allclose(neck(x)[0], ref(x)[0], rtol=0, atol=ATOL)


@pytest.mark.parametrize('num_layers', [2, 3])
def test_v3_projector_matches_mmpretrain_non_linear_neck(num_layers):
    neck = MoCoProjectionNeck(
        256,
        512,
        64,
        num_layers=num_layers,
        with_bias=False,
        with_bn=True,
        with_last_bn=True,
        with_last_bn_affine=False,
        with_avg_pool=False)
    expected = ['Linear', 'BatchNorm1d', 'ReLU'] * (num_layers - 1) + [
        'Linear', 'BatchNorm1d'
    ]
    assert layer_types(neck) == expected
    assert not neck.mlp[-1].affine and neck.mlp[1].affine
    assert all(m.bias is None for m in neck.mlp if isinstance(m, nn.Linear))
    ref = NonLinearNeck(
        256,
        512,
        64,
        num_layers=num_layers,
        with_bias=False,
        with_last_bn=True,
        with_last_bn_affine=False,
        with_avg_pool=False,
        norm_cfg=dict(type='BN1d'))
    linears = [m for m in neck.mlp if isinstance(m, nn.Linear)]
    norms = [m for m in neck.mlp if isinstance(m, nn.BatchNorm1d)]
    for i, (fc, bn) in enumerate(zip(linears, norms)):
        getattr(ref, f'fc{i}').load_state_dict(fc.state_dict())
        getattr(ref, f'bn{i}').load_state_dict(bn.state_dict())
    neck.double(), ref.double()
    x = (torch.randn(8, 256, dtype=torch.float64), )
    assert torch.allclose(neck(x)[0], ref(x)[0], rtol=0, atol=ATOL)


def test_v3_predictor_has_no_last_bn():
    neck = MoCoProjectionNeck(
        256, 4096, 256, with_bias=False, with_bn=True, with_avg_pool=False)
    assert layer_types(neck) == ['Linear', 'BatchNorm1d', 'ReLU', 'Linear']


def test_several_feature_maps_are_refused():
    neck = MoCoProjectionNeck(4, 4, 2)
    with pytest.raises(ValueError, match='out_indices'):
        neck((torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2)))
