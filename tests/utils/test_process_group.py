# Copyright (c) mocoplug contributors. All rights reserved.
import json
import os
import socket
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from mocoplug.utils import leave_process_group


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _worker(rank: int, port: int, out_dir: str):
    dist.init_process_group(
        'gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
    if rank == 1:
        time.sleep(0.5)  # the slow rank
    arrived = time.time()
    leave_process_group()
    left = time.time()
    with open(os.path.join(out_dir, f'{rank}.json'), 'w') as f:
        json.dump(
            dict(arrived=arrived, left=left, alive=dist.is_initialized()), f)


def test_ranks_wait_for_each_other_then_the_group_is_gone(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=2)
    fast, slow = (
        json.loads((tmp_path / f'{r}.json').read_text()) for r in (0, 1))
    assert not fast['alive'] and not slow['alive']
    # rank 0 left only once rank 1 had arrived
    assert fast['left'] >= slow['arrived']


def test_single_process_is_a_no_op():
    assert not dist.is_initialized()
    leave_process_group()
    assert not dist.is_initialized()
