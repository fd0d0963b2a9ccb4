# Copyright (c) mocoplug contributors. All rights reserved.
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from mocoplug.datasets.transforms import ReseedWorkerPerEpoch


class RandomDraws(Dataset):
    """Each sample is what the three generators give after the pipeline
    (the seeder) ran, as an augmentation would draw."""

    def __init__(self, seeder):
        self.seeder = seeder

    def __len__(self):
        return 8

    def __getitem__(self, index):
        self.seeder({})
        return torch.tensor([
            random.random(),
            np.random.rand(),
            torch.rand(()).item(),
        ],
                            dtype=torch.float64)


def epochs(persistent, epochs=(0, 1, 2)):
    seeder = ReseedWorkerPerEpoch(seed=3, rank=0)
    loader = DataLoader(
        RandomDraws(seeder),
        batch_size=2,
        num_workers=2,
        persistent_workers=persistent)
    out = []
    for epoch in epochs:
        seeder.set_epoch(epoch)
        out.append(torch.cat(list(loader)))
    return out


def test_persistent_workers_draw_as_fresh_ones_and_resume():
    fresh = epochs(persistent=False)
    persistent = epochs(persistent=True)
    for a, b in zip(fresh, persistent):
        assert torch.equal(a, b)
    # a resumed run starts new workers at epoch 2: same draws
    assert torch.equal(epochs(persistent=True, epochs=(2, ))[0], fresh[2])
    # every epoch has its own streams
    assert not torch.equal(fresh[0], fresh[1])


def test_main_process_is_left_alone():
    seeder = ReseedWorkerPerEpoch(seed=3)
    seeder.set_epoch(5)
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    assert seeder({'img': 1}) == {'img': 1}
    assert torch.equal(torch.rand(2), expected)
