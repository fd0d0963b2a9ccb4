# Copyright (c) mocoplug contributors. All rights reserved.
"""Multi-process tests on CPU: a free local port and a gloo process group."""
import socket

import torch.distributed as dist


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def join_gloo_group(rank: int, port: int, world_size: int = 2) -> None:
    """Join the default process group (gloo, over 127.0.0.1:port) as
    ``rank``; call it first thing in an ``mp.spawn`` worker."""
    dist.init_process_group(
        'gloo',
        init_method=f'tcp://127.0.0.1:{port}',
        rank=rank,
        world_size=world_size)
