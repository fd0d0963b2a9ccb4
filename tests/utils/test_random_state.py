# Copyright (c) mocoplug contributors. All rights reserved.
import io
import random

import numpy as np
import torch

from mocoplug.utils.random_state import get_random_state, set_random_state


def draw():
    return (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(),
            np.random.randn(), torch.rand(3).tolist(),
            torch.randperm(10).tolist())


def test_restore_replays_every_generator():
    random.gauss(0, 1)  # leaves a cached Gaussian in both generators
    np.random.randn()
    state = get_random_state()
    first = draw()
    assert draw() != first  # the streams moved on
    assert set_random_state(state) == []
    assert draw() == first


def test_state_loads_with_weights_only():
    """Only tensors, ints, floats, None, lists and dicts: torch.load with
    weights_only=True and no extra allowed globals reads it."""
    state = get_random_state()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    first = draw()
    set_random_state(loaded)
    assert draw() == first


def test_cuda_states_without_the_devices_are_reported():
    state = get_random_state()
    state['cuda'] = [torch.zeros(16, dtype=torch.uint8)] * 3
    missing = set_random_state(state)
    if torch.cuda.device_count() != 3:
        assert missing == [
            'the CUDA generators (3 saved, '
            f'{torch.cuda.device_count()} visible now)'
        ]
