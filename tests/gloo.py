# Copyright (c) mocoplug contributors. All rights reserved.
"""Multi-process tests on CPU: a free local port, a gloo process group, and
what travels through it."""
import os
import pickle
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def run_two_ranks(fn,
                  *args,
                  start_method: str = 'fork',
                  nprocs: int = 2) -> None:
    """``fn(rank, *args)`` in two processes forked from this one: no fresh
    interpreter imports torch and the OpenMMLab packages again (~8 s a
    test with ``mp.spawn``). One torch thread each (a forked OpenMP pool is
    not usable; ``make test`` gives each worker one thread anyway). Raises
    as ``mp.spawn`` does. Tests of what a process does at exit keep
    ``mp.spawn``: a forked child exits without running ``atexit``; so do
    runs that compile (``start_method='spawn'``, ``nprocs=1`` for one):
    autograd refuses to run in a process forked after a compiled backward
    (its first backward starts a thread), so no test process may run one."""
    mp.start_processes(
        _one_thread,
        args=(fn, ) + args,
        nprocs=nprocs,
        start_method=start_method)


def _one_thread(rank: int, fn, *args) -> None:
    torch.set_num_threads(1)
    fn(rank, *args)


def torchrun_env(rank: int, port: int, world_size: int = 2) -> None:
    """The environment torchrun gives ``rank`` (127.0.0.1:port), for a
    worker of :func:`run_two_ranks` that builds a Runner with
    ``launcher='pytorch'``."""
    os.environ.update(
        MASTER_ADDR='127.0.0.1',
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size))


def join_gloo_group(rank: int, port: int, world_size: int = 2) -> None:
    """Join the default process group (gloo, over 127.0.0.1:port) as
    ``rank``; call it first thing in a worker of :func:`run_two_ranks`."""
    dist.init_process_group(
        'gloo',
        init_method=f'tcp://127.0.0.1:{port}',
        rank=rank,
        world_size=world_size)


def count_collective_bytes(record):
    """Wrap torch.distributed's collectives to add up the bytes this rank
    receives (what all_gather's and gather's output lists hold, the tensor
    of all_reduce and broadcast) and to note any object collective or
    pickle (of a tensor view: its whole storage), which must not be used.
    Call it in a worker process (it patches the modules)."""

    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors or ())

    def wrap(name, received):
        fn = getattr(dist, name)

        def wrapped(*args, **kwargs):
            record['received'] += received(*args, **kwargs)
            return fn(*args, **kwargs)

        setattr(dist, name, wrapped)

    # torch.distributed's argument names
    wrap('all_gather', lambda tensor_list, *a, **k: nbytes(tensor_list))
    wrap(
        'gather',
        lambda tensor, gather_list=None, *a, **k: nbytes(gather_list))
    wrap('all_reduce', lambda tensor, *a, **k: nbytes([tensor]))
    wrap('broadcast', lambda tensor, *a, **k: nbytes([tensor]))
    for name in ('all_gather_object', 'gather_object',
                 'broadcast_object_list'):
        setattr(dist, name, noted(getattr(dist, name), record))
    # mmengine's collect_results on CPU pickles the parts to files
    for name in ('dump', 'dumps'):
        setattr(pickle, name, noted(getattr(pickle, name), record))


def noted(fn, record):
    """``fn``, noting in ``record`` that it was called."""

    def wrapped(*args, **kwargs):
        record['objects'] = 1
        return fn(*args, **kwargs)

    return wrapped
