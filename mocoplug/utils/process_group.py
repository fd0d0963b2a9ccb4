# Copyright (c) mocoplug contributors. All rights reserved.
import atexit

import torch.distributed as dist

_REGISTERED = False


def leave_process_group() -> None:
    """Wait for every rank, then destroy the default process group, if any."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def leave_process_group_at_exit() -> None:
    """Call :func:`leave_process_group` at interpreter exit (registered
    once; ``MoCoRunner`` calls it after a successful run)."""
    global _REGISTERED
    if not _REGISTERED:
        atexit.register(leave_process_group)
        _REGISTERED = True
