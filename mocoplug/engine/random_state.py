# Copyright (c) mocoplug contributors. All rights reserved.
"""The global random state of a process, in checkpoint-safe types.

Python's ``random``, NumPy's global generator, torch's CPU generator and the
generator of the process's current CUDA device (with its index; restored
into the resuming rank's current device) are captured as tensors, ints and
floats only, so a checkpoint still loads with ``weights_only=True`` (see
:mod:`mocoplug_site.checkpoint`). :func:`set_random_state` also reads the
older format, a list of every visible device's generator.
"""
import random
from typing import Any, Dict, List, Optional

import numpy as np
import torch


def cuda_device_to_save() -> Optional[int]:
    """The CUDA device whose generator this process saves, or None.

    None unless CUDA is initialised in this process: a process that never
    touched CUDA has drawn nothing there, and reading a generator would
    create a CUDA context for nothing.
    """
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return None


def cuda_device_to_restore() -> Optional[int]:
    """The CUDA device a saved generator is restored into, or None without
    CUDA: this process's current device."""
    if torch.cuda.is_available():
        return torch.cuda.current_device()
    return None


def get_random_state() -> Dict[str, Any]:
    """Capture the global random state of this process.

    Returns:
        dict: ``python``, ``numpy``, ``torch`` and ``cuda`` entries made of
        tensors, ints, floats, None and lists. ``cuda`` is
        ``dict(device=index, state=tensor)`` for this process's own device,
        or None when CUDA is not in use.
    """
    version, words, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    if kind != 'MT19937':  # numpy's legacy global generator is always MT
        raise RuntimeError(f'unexpected numpy global generator {kind!r}')
    device = cuda_device_to_save()
    cuda = None
    if device is not None:
        cuda = dict(
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


def _own_state_of_list(states: List[torch.Tensor],
                       device: int) -> Optional[torch.Tensor]:
    """This rank's generator in an older checkpoint's list of every
    visible device's generator, or None when it cannot be told.

    One entry: the saving process saw one device, its own. As many entries
    as devices visible now: the list is indexed like this machine's devices
    (what the older code assumed when it restored the list by index), so
    the entry of the current device is this rank's. Otherwise the saving
    rank's device index is unknown.
    """
    if len(states) == 1:
        return states[0]
    if len(states) == torch.cuda.device_count() and device < len(states):
        return states[device]
    return None


def set_random_state(state: Dict[str, Any]) -> List[str]:
    """Restore a state captured by :func:`get_random_state`.

    Tensors may come back on another device (``Runner.resume`` maps a
    checkpoint onto the GPU); they are moved to the CPU first. The saved
    CUDA generator goes to this process's current device. An older state's
    list of every visible device's generator is read as described in
    :func:`_own_state_of_list`.

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
    if not cuda:  # None, or an older checkpoint's empty list
        return []
    device = cuda_device_to_restore()
    saved_on = f'cuda:{cuda["device"]}' if isinstance(cuda, dict) else 'CUDA'
    if device is None:
        return [f'the CUDA generator (saved on {saved_on}; no CUDA now)']
    if isinstance(cuda, dict):
        own = cuda['state']
    else:
        own = _own_state_of_list(cuda, device)
        if own is None:
            return [
                f'the CUDA generator (an older checkpoint saved every '
                f'visible device\'s, {len(cuda)}, without saying which was '
                f'this rank\'s; {torch.cuda.device_count()} visible now)'
            ]
    torch.cuda.set_rng_state(own.cpu(), device)
    return []
