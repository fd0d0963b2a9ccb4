# Copyright (c) mocoplug contributors. All rights reserved.
"""The global random state of a process, in checkpoint-safe types (tensors,
ints and floats, so a checkpoint loads with ``weights_only=True``)."""
import random
from typing import Any, Dict, List, Optional

import numpy as np
import torch


def cuda_device_to_save() -> Optional[int]:
    """The CUDA device whose generator this process saves; None unless CUDA
    is initialised here (reading would create a context)."""
    used = torch.cuda.is_available() and torch.cuda.is_initialized()
    return torch.cuda.current_device() if used else None


def cuda_device_to_restore() -> Optional[int]:
    """The current CUDA device (where a generator is restored), or None."""
    return torch.cuda.current_device() if torch.cuda.is_available() else None


def get_random_state() -> Dict[str, Any]:
    """Capture the global random state of this process.

    Returns:
        dict: ``python``, ``numpy``, ``torch`` and ``cuda`` entries; ``cuda``
        is ``dict(device=index, state=tensor)`` of the current device, or
        None when CUDA is not in use.
    """
    version, words, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    if kind != 'MT19937':  # numpy's legacy global generator is always MT
        raise RuntimeError(f'unexpected numpy global generator {kind!r}')
    device = cuda_device_to_save()
    cuda = None if device is None else dict(
        device=int(device), state=torch.cuda.get_rng_state(device).clone())
    return dict(
        python=dict(
            version=int(version),
            words=torch.tensor(words, dtype=torch.int64),
            gauss_next=gauss_next),
        numpy=dict(
            keys=torch.from_numpy(keys.astype(np.int64)),
            pos=int(pos),
            has_gauss=int(has_gauss),
            cached_gaussian=float(cached_gaussian)),
        torch=torch.get_rng_state(),
        cuda=cuda)


def set_random_state(state: Dict[str, Any]) -> List[str]:
    """Restore a state captured by :func:`get_random_state`, the CUDA one
    into the current device.

    Args:
        state (dict): The captured state.

    Returns:
        List[str]: What could not be restored (empty when all was).
    """
    py = state['python']
    words = tuple(int(w) for w in py['words'].cpu().tolist())
    random.setstate((py['version'], words, py['gauss_next']))
    npy = state['numpy']
    np.random.set_state(
        ('MT19937', npy['keys'].cpu().numpy().astype(np.uint32), npy['pos'],
         npy['has_gauss'], npy['cached_gaussian']))
    torch.set_rng_state(state['torch'].cpu())
    cuda = state.get('cuda')
    if cuda is None:
        return []
    device = cuda_device_to_restore()
    if device is None:
        return [
            f'the CUDA generator (saved on cuda:{cuda["device"]}; no CUDA now)'
        ]
    torch.cuda.set_rng_state(cuda['state'].cpu(), device)
    return []
