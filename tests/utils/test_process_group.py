# Copyright (c) mocoplug contributors. All rights reserved.
import json
import os
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from mocoplug.utils import leave_process_group
from ..gloo import free_port, join_gloo_group


def _worker(rank: int, port: int, out_dir: str):
    join_gloo_group(rank, port)
    if rank == 1:
        time.sleep(0.5)  # the slow rank
    arrived = time.time()
    leave_process_group()
    left = time.time()
    with open(os.path.join(out_dir, f'{rank}.json'), 'w') as f:
        json.dump(
            dict(arrived=arrived, left=left, alive=dist.is_initialized()), f)


def test_ranks_wait_for_each_other_then_the_group_is_gone(tmp_path):
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    fast, slow = (
        json.loads((tmp_path / f'{r}.json').read_text()) for r in (0, 1))
    assert not fast['alive'] and not slow['alive']
    # rank 0 left only once rank 1 had arrived
    assert fast['left'] >= slow['arrived']


def test_single_process_is_a_no_op():
    assert not dist.is_initialized()
    leave_process_group()
    assert not dist.is_initialized()
