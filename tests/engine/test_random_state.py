# Copyright (c) mocoplug contributors. All rights reserved.
import io
import random

import numpy as np
import pytest
import torch

import mocoplug.engine.random_state as random_state
from mocoplug.engine.random_state import get_random_state, set_random_state


def draw():
    return (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(),
            np.random.randn(), torch.rand(3).tolist(),
            torch.randperm(10).tolist())


def weights_only_round_trip(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


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
    loaded = weights_only_round_trip(state)
    first = draw()
    set_random_state(loaded)
    assert draw() == first


class FakeCuda:
    """torch.cuda's device and generator functions for a machine with
    ``count`` devices, this process on ``current``; generator i starts as
    16 bytes of value 10 * (i + 1). Records which devices were read and
    written."""

    def __init__(self, monkeypatch, count, current, initialised=True):
        self.count, self.current = count, current
        self.generators = {
            i: torch.full((16, ), 10 * (i + 1), dtype=torch.uint8)
            for i in range(count)
        }
        self.read, self.written = [], []
        cuda = torch.cuda
        monkeypatch.setattr(cuda, 'is_available', lambda: True)
        monkeypatch.setattr(cuda, 'is_initialized', lambda: initialised)
        monkeypatch.setattr(cuda, 'device_count', lambda: count)
        monkeypatch.setattr(cuda, 'current_device', lambda: self.current)
        monkeypatch.setattr(cuda, 'get_rng_state', self.get_rng_state)
        monkeypatch.setattr(cuda, 'set_rng_state', self.set_rng_state)
        monkeypatch.setattr(cuda, 'get_rng_state_all', self.forbidden)
        monkeypatch.setattr(cuda, 'set_rng_state_all', self.forbidden)

    def get_rng_state(self, device):
        self.read.append(device)
        return self.generators[device].clone()

    def set_rng_state(self, state, device):
        assert state.device.type == 'cpu' and state.dtype == torch.uint8
        self.written.append(device)
        self.generators[device] = state.clone()

    def forbidden(self, *args):
        raise AssertionError('every device\'s generator was touched')


def test_the_own_cuda_generator_is_saved_with_its_index(monkeypatch):
    cuda = FakeCuda(monkeypatch, count=4, current=2)
    assert random_state.cuda_device_to_save() == 2
    state = get_random_state()
    assert cuda.read == [2]
    assert state['cuda']['device'] == 2
    assert torch.equal(state['cuda']['state'], cuda.generators[2])
    # a copy: later draws on the device do not change the snapshot
    assert state['cuda']['state'] is not cuda.generators[2]


def test_no_cuda_state_without_an_initialised_device(monkeypatch):
    cuda = FakeCuda(monkeypatch, count=2, current=1, initialised=False)
    assert random_state.cuda_device_to_save() is None
    assert get_random_state()['cuda'] is None
    assert cuda.read == []


@pytest.mark.parametrize('count,current', [(1, 0), (8, 5), (4, 2)])
def test_restored_into_the_current_device_whatever_its_index(
        monkeypatch, count, current):
    """Saved by the rank on cuda:2 of 4 devices; resumed where that rank
    has cuda:0 of 1 (one visible device per process), cuda:5 of 8, or the
    same cuda:2 of 4."""
    saver = FakeCuda(monkeypatch, count=4, current=2)
    state = weights_only_round_trip(get_random_state())
    saved = saver.generators[2]
    loader = FakeCuda(monkeypatch, count=count, current=current)
    assert random_state.cuda_device_to_restore() == current
    assert set_random_state(state) == []
    assert loader.written == [current]
    assert torch.equal(loader.generators[current], saved)
    for i in range(count):  # no other device's generator changed
        if i != current:
            assert torch.equal(
                loader.generators[i],
                torch.full((16, ), 10 * (i + 1), dtype=torch.uint8))


def test_cuda_state_without_cuda_is_reported(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    state = get_random_state()
    first = draw()
    state['cuda'] = dict(device=3, state=torch.zeros(16, dtype=torch.uint8))
    assert set_random_state(state) == [
        'the CUDA generator (saved on cuda:3; no CUDA now)'
    ]
    assert draw() == first  # the CPU generators were still restored
