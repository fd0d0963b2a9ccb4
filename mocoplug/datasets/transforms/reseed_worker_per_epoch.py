# Copyright (c) mocoplug contributors. All rights reserved.
import random
from typing import Optional

import numpy as np
import torch
from mmcv.transforms import BaseTransform
from torch.utils.data import get_worker_info

from mocoplug.registry import TRANSFORMS


@TRANSFORMS.register_module()
class ReseedWorkerPerEpoch(BaseTransform):
    """In a dataloader worker, seed Python's, NumPy's and torch's CPU
    generators from ``(seed, epoch, rank, worker id)`` at each epoch's first
    sample (docs/design_notes.md#exact-resume); the data is untouched.

    Args:
        seed (int): Base seed (the runner's seed).
        rank (int): Rank of this process.
        epoch (torch.Tensor, optional): A shared-memory int64 scalar holding
            the current epoch; by default a new one holding -1.
    """

    def __init__(self,
                 seed: int = 0,
                 rank: int = 0,
                 epoch: Optional[torch.Tensor] = None) -> None:
        self.seed, self.rank = int(seed), int(rank)
        self.epoch = torch.full((), -1, dtype=torch.int64).share_memory_() \
            if epoch is None else epoch
        self._seeded_epoch: Optional[int] = None  # per process (worker)

    def set_epoch(self, epoch: int) -> None:
        """Announce a new epoch (main process, before its first batch)."""
        self.epoch.fill_(int(epoch))

    def transform(self, results: dict) -> dict:
        worker, epoch = get_worker_info(), int(self.epoch)
        if worker is None or epoch == self._seeded_epoch:
            return results
        entropy = [self.seed & (2**64 - 1), epoch + 1, self.rank, worker.id]
        words = np.random.SeedSequence(entropy).generate_state(4)
        random.seed(int.from_bytes(words.tobytes(), 'little'))
        np.random.seed(words)
        torch.manual_seed(int(words[0]) | (int(words[1]) << 32))
        self._seeded_epoch = epoch
        return results

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(seed={self.seed}, '
                f'rank={self.rank})')
