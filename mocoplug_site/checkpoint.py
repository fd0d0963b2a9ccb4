# Copyright (c) mocoplug contributors. All rights reserved.
"""Make mmengine load its own checkpoints under torch >= 2.6.

torch 2.6 switched ``torch.load`` to ``weights_only=True``, which refuses
every Python object that is not a tensor or a builtin container. mmengine
0.10.7 still calls ``torch.load(filename)`` and its checkpoints carry the
runner's message hub (``HistoryBuffer`` objects holding numpy arrays and
numpy scalars), so ``--resume`` and ``load_from`` fail on checkpoints that
mmengine itself wrote.

This module is the one place that fixes it: it replaces mmengine's loader
for local paths (the ``''`` scheme of ``CheckpointLoader``, used by resume,
``load_from``, ``Pretrained`` init and mocoplug's tools) with one that keeps
``weights_only=True`` and allows exactly the types mmengine writes: numpy
arrays, dtypes and scalars, and ``HistoryBuffer``. Anything else is still
refused, with an error that names the offending types and the way out.
"""
import os
import os.path as osp
import pickle
from typing import Any, List, Optional

import numpy as np
import torch
from mmengine.logging import HistoryBuffer

UNSAFE_ENV = 'MOCOPLUG_TRUST_CHECKPOINTS'


def _numpy_globals() -> List[Any]:
    """The numpy callables and classes that pickled arrays/scalars use."""
    try:  # numpy >= 2
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray
    types: List[Any] = [
        multiarray._reconstruct, multiarray.scalar, np.ndarray, np.dtype
    ]
    # dtype classes such as numpy.dtypes.Float64DType (numpy >= 1.25)
    types += [type(np.dtype(t)) for t in np.sctypeDict.values()]
    if multiarray.__name__ != 'numpy.core.multiarray':  # numpy >= 2
        # the same two functions under the names numpy 1.x pickled them
        types += [(multiarray._reconstruct,
                   'numpy.core.multiarray._reconstruct'),
                  (multiarray.scalar, 'numpy.core.multiarray.scalar')]
    return list(dict.fromkeys(types))


def _history_buffer_getattr(obj: Any, name: str) -> Any:
    """Stands in for ``getattr`` while unpickling.

    A pickled ``HistoryBuffer`` names its statistics methods as
    ``getattr(HistoryBuffer, 'mean')``. A general ``getattr`` would let a
    crafted file reach any method of the allowed types (e.g.
    ``ndarray.tofile``), so only these look-ups are served.
    """
    allowed = {'min', 'max', 'current', 'mean'}
    allowed.update(getattr(HistoryBuffer, '_statistics_methods', {}))
    if obj is HistoryBuffer and name in allowed:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'getattr({obj!r}, {name!r}) is not allowed in a checkpoint')


def _global_name(entry: Any) -> str:
    if isinstance(entry, tuple):
        return entry[1]
    return f'{entry.__module__}.{entry.__qualname__}'


def trusted_globals() -> List[Any]:
    """Non-tensor globals allowed in checkpoints: those mmengine writes."""
    return _numpy_globals() + [
        HistoryBuffer, (_history_buffer_getattr, 'builtins.getattr')
    ]


def load_from_local(filename: str, map_location: Optional[Any] = None) -> Any:
    """Load a local checkpoint with ``weights_only=True`` and the types
    mmengine writes allowed.

    Args:
        filename (str): Path of the checkpoint.
        map_location: Same as :func:`torch.load`.

    Returns:
        The loaded object (usually a dict).
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    if not hasattr(torch.serialization, 'safe_globals'):  # torch < 2.5
        return torch.load(filename, map_location=map_location)
    if os.environ.get(UNSAFE_ENV) == '1':
        return torch.load(
            filename, map_location=map_location, weights_only=False)
    try:
        with torch.serialization.safe_globals(trusted_globals()):
            return torch.load(
                filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ''
        try:
            names = torch.serialization.get_unsafe_globals_in_checkpoint(
                filename)
        except Exception as not_read:  # noqa: BLE001 - named below
            raise RuntimeError(
                f'Cannot load {filename}: it is not a checkpoint torch.load '
                f'reads ({type(not_read).__name__}: {not_read}; {first}). '
                'Give a file written by torch.save (mmengine, mocoplug, '
                'torchvision, the official MoCo code).') from err
        trusted = {_global_name(g) for g in trusted_globals()}
        names = [name for name in names if name not in trusted]
        if not names:  # no code in it: another fault
            raise RuntimeError(f'Cannot load {filename}: {first}') from err
        raise RuntimeError(
            f'Cannot load {filename}: it contains Python objects that are '
            'not tensors and not among the types mmengine writes'
            f' ({", ".join(names)}). Loading '
            'them would run code stored in the file. If you trust the '
            f'file, set {UNSAFE_ENV}=1 to load it without restrictions.'
        ) from err


def register_checkpoint_loader() -> None:
    """Install :func:`load_from_local` in place of mmengine's local loader
    (imported here: :mod:`mocoplug_site` calls this when mmengine imports
    that module)."""
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_from_local, force=True)
