# Copyright (c) mocoplug contributors. All rights reserved.
"""BF16OptimWrapper refuses, on its first CPU forward, the convolutions
whose bfloat16 weight gradient oneDNN computes from uninitialised memory
(design_notes.md#precision), and only those."""
import pytest
import torch
import torch.nn as nn

from mocoplug.engine.optimizers import BF16OptimWrapper


def wrapper_and_net(stride):
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    return BF16OptimWrapper(optimizer=optimizer), net


@pytest.mark.parametrize('shape', [(1, 1), (4, 1), (1, 4), (2, 2)])
def test_input_narrower_than_the_stride_is_refused(shape):
    wrapper, net = wrapper_and_net(stride=3 if shape == (2, 2) else 2)
    with pytest.raises(
            ValueError,
            match=r'3x3 convolution of stride \dx\d '
            rf'gets a {shape[0]}x{shape[1]} input'):
        with wrapper.optim_context(net):
            net(torch.randn(2, 3, *shape))
    # refused before any weight gradient exists; the hooks are gone
    assert all(p.grad is None for p in net.parameters())
    assert not any(m._forward_pre_hooks for m in net.modules())


def test_inputs_as_wide_as_the_stride_train_and_are_checked_once():
    wrapper, net = wrapper_and_net(stride=2)
    x = torch.randn(2, 3, 2, 2)
    with wrapper.optim_context(net):
        loss = net(x).float().square().mean()
    wrapper.update_params(loss)
    assert not any(m._forward_pre_hooks for m in net.modules())
    # after the first forward nothing is checked: a later narrow input is
    # the user's (the check costs a hook call per convolution)
    with wrapper.optim_context(net):
        assert net(torch.randn(2, 3, 1, 1)).dtype == torch.bfloat16
    # the 1x1 convolution (kernel 1) is never refused
    one = nn.Conv2d(3, 4, 1, stride=2)
    fresh = BF16OptimWrapper(
        optimizer=torch.optim.SGD(one.parameters(), lr=0.1))
    with fresh.optim_context(one):
        assert one(torch.randn(2, 3, 1, 1)).shape == (2, 4, 1, 1)
