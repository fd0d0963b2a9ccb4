# Copyright (c) mocoplug contributors. All rights reserved.
import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint

from mocoplug.compat import load_from_local


def test_loader_is_installed_for_local_paths():
    assert CheckpointLoader._get_checkpoint_loader('/x.pth') is \
        load_from_local


def test_numpy_and_history_buffer_metadata_load(tmp_path):
    buf = HistoryBuffer()
    buf.update(0.5)
    buf.update(1.5)
    meta = dict(eta=np.float64(3.0), arr=np.arange(3), buf=buf)
    path = tmp_path / 'ckpt.pth'
    torch.save(dict(state_dict=dict(w=torch.ones(2)), meta=meta), path)
    ckpt = _load_checkpoint(str(path))
    assert ckpt['meta']['eta'] == 3.0
    assert ckpt['meta']['arr'].tolist() == [0, 1, 2]
    assert ckpt['meta']['buf'].mean() == 1.0
    assert torch.equal(ckpt['state_dict']['w'], torch.ones(2))


def test_foreign_objects_are_refused_with_the_fix(tmp_path):
    path = tmp_path / 'evil.pth'
    torch.save(dict(state_dict={}, hook=print), path)
    with pytest.raises(
            RuntimeError,
            match=r'builtins\.print.*'
            r'MOCOPLUG_TRUST_CHECKPOINTS=1'):
        _load_checkpoint(str(path))


def test_trusted_env_loads_anything(tmp_path, monkeypatch):
    path = tmp_path / 'trusted.pth'
    torch.save(dict(fn=len), path)
    monkeypatch.setenv('MOCOPLUG_TRUST_CHECKPOINTS', '1')
    assert _load_checkpoint(str(path))['fn'] is len


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match='nope.pth'):
        _load_checkpoint(str(tmp_path / 'nope.pth'))


class _GetattrPayload:
    """Pickles as ``getattr(numpy.ndarray, 'tofile')``: a method that would
    write files if a general getattr were allowed."""

    def __reduce__(self):
        return getattr, (np.ndarray, 'tofile')


def test_getattr_is_restricted_to_history_buffer(tmp_path):
    path = tmp_path / 'getattr.pth'
    torch.save(dict(x=_GetattrPayload()), path)
    with pytest.raises(RuntimeError, match='Cannot load'):
        _load_checkpoint(str(path))


def test_a_checkpoint_written_under_numpy_1_loads(tmp_path):
    """numpy 1.x pickled arrays and scalars as numpy.core.multiarray.*;
    under numpy 2 they live in numpy._core: the same two functions are
    allowed under their old names (nothing else widened)."""
    path = tmp_path / 'numpy1.pth'
    meta = dict(eta=np.float64(3.0), arr=np.arange(3))
    torch.save(
        dict(state_dict=dict(w=torch.ones(2)), meta=meta),
        path,
        _use_new_zipfile_serialization=False)
    data = path.read_bytes()
    if b'numpy._core.multiarray' in data:  # numpy 2: write numpy 1's names
        path.write_bytes(
            data.replace(b'numpy._core.multiarray', b'numpy.core.multiarray'))
    assert b'numpy.core.multiarray\n_reconstruct' in path.read_bytes()
    ckpt = _load_checkpoint(str(path))
    assert ckpt['meta']['eta'] == 3.0
    assert ckpt['meta']['arr'].tolist() == [0, 1, 2]


def test_a_file_that_is_no_checkpoint_is_not_said_to_hold_code(tmp_path):
    path = tmp_path / 'notes.pth'
    path.write_bytes(b'not a checkpoint\n')
    with pytest.raises(
            RuntimeError, match='is not a checkpoint torch.load '
            'reads') as error:
        _load_checkpoint(str(path))
    assert 'MOCOPLUG_TRUST_CHECKPOINTS' not in str(error.value)
    assert 'run code' not in str(error.value)
