# Copyright (c) mocoplug contributors. All rights reserved.
"""The global random state of a process, in checkpoint-safe types.

Python's ``random``, NumPy's global generator, torch's CPU generator and
torch's CUDA generators (every visible device) are captured as tensors, ints
and floats only, so a checkpoint carrying them still loads with
``torch.load(weights_only=True)`` (see ``checkpoint_compat``) without
widening the set of allowed types.
"""
import random
from typing import Any, Dict, List

import numpy as np
import torch


def get_random_state() -> Dict[str, Any]:
    """Capture the global random state of this process.

    Returns:
        dict: ``python``, ``numpy``, ``torch`` and ``cuda`` entries made of
        tensors, ints, floats, None and lists.
    """
    version, words, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    if kind != 'MT19937':  # numpy's legacy global generator is always MT
        raise RuntimeError(f'unexpected numpy global generator {kind!r}')
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # Only initialised devices have drawn numbers; reading the state of
        # the others would create a CUDA context for nothing.
        cuda = [s.clone() for s in torch.cuda.get_rng_state_all()]
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
    """Restore a state captured by :func:`get_random_state`.

    Tensors may come back on another device (``Runner.resume`` maps a
    checkpoint onto the GPU); they are moved to the CPU first.

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
    cuda = state.get('cuda') or []
    if not cuda:
        return []
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if len(cuda) != count:
        return [
            f'the CUDA generators ({len(cuda)} saved, {count} visible now)'
        ]
    torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
    return []
