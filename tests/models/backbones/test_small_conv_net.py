# Copyright (c) mocoplug contributors. All rights reserved.
import pytest
import torch
import torch.nn as nn

from mocoplug.registry import MODELS


def test_is_the_plain_conv_bn_relu_pool_stack():
    """Same seed, same layers in the same order: the same weights and the
    same output as the stack written by hand with torch.nn."""
    torch.manual_seed(0)
    net = MODELS.build(
        dict(type='SmallConvNet', channels=(4, 8, 16), pool_after=(0, 1)))
    torch.manual_seed(0)
    ref = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
        nn.ReLU())
    net.init_weights()  # no init_cfg: PyTorch's default init is kept
    assert net.out_channels == 16
    x = torch.randn(2, 3, 32, 32)
    out = net(x)
    assert isinstance(out, tuple) and len(out) == 1
    assert out[0].shape == (2, 16, 8, 8)
    assert torch.allclose(out[0], ref(x), atol=1e-6)


def test_default_net_of_the_demo_maps_32_px_to_4_px():
    net = MODELS.build(dict(type='SmallConvNet'))
    assert net(torch.randn(2, 3, 32, 32))[0].shape == (2, 256, 4, 4)
    assert sum(isinstance(m, nn.Conv2d) for m in net.modules()) == 4


def test_pool_index_outside_the_layers_is_a_clear_error():
    with pytest.raises(ValueError, match='pool_after'):
        MODELS.build(
            dict(type='SmallConvNet', channels=(4, 8), pool_after=(2, )))
