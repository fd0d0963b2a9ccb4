# Copyright (c) mocoplug contributors. All rights reserved.
"""The two views a MoCo step takes: unchanged, or channels-last when
asked, and a clear error naming the fix for any other number of views."""
from types import SimpleNamespace

import pytest
import torch

from mocoplug.models.algorithms.base_momentum import BaseMomentumSelfSupervisor


def views(inputs, channels_last=False):
    model = SimpleNamespace(channels_last=channels_last)
    return BaseMomentumSelfSupervisor.views(model, inputs, 'MoCo')


def test_two_views_are_returned_as_they_are():
    a, b = torch.rand(2, 3, 4, 4), torch.rand(2, 3, 4, 4)
    view_1, view_2 = views([a, b])
    assert view_1 is a and view_2 is b


def test_channels_last_keeps_the_values():
    a, b = torch.rand(2, 3, 4, 4), torch.rand(2, 3, 4, 4)
    view_1, view_2 = views([a, b], channels_last=True)
    for view, ref in ((view_1, a), (view_2, b)):
        assert view.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(view, ref)


@pytest.mark.parametrize('inputs,got', [
    (torch.rand(2, 3, 4, 4), 'a single Tensor'),
    ([torch.rand(2, 3, 4, 4)] * 3, '3 views'),
])
def test_other_than_two_views_names_the_fix(inputs, got):
    with pytest.raises(
            ValueError,
            match=f'MoCo needs two .* but got {got}: '
            'wrap the train pipeline in .*MultiView'):
        views(inputs)
