# Copyright (c) mocoplug contributors. All rights reserved.
"""Detection without mmcv's compiled ops stops at once with an error that
names the set-up command, instead of mmcv's ``No module named 'mmcv._ext'``
deep inside mmdet's model registry.

mmcv-lite is mmcv's Python code without the extension module ``mmcv._ext``
(its op loader imports exactly that module), so a ``None`` entry for it in
``sys.modules``, which makes ``import mmcv._ext`` raise
``ModuleNotFoundError``, is mmcv-lite as far as any import can tell.
"""
import importlib
import os.path as osp
import subprocess
import sys

import mmdet
import pytest
from mmengine.config import Config

import mocoplug
from mocoplug.detection.mmcv_ops import MissingMMCVOpsError
from .conftest import ROOT, VOC_C4

SETUP_COMMANDS = ('make setup-full', 'bash tools/setup_env.sh --with-ops')
WITHOUT_OPS = "import sys; sys.modules['mmcv._ext'] = None\n"


@pytest.fixture
def without_mmcv_ops(monkeypatch):
    """mmcv-lite in place of mmcv, and mocoplug.detection not yet imported
    (both restored afterwards, so the registered hook stays registered)."""
    monkeypatch.setitem(sys.modules, 'mmcv._ext', None)
    monkeypatch.delitem(sys.modules, 'mocoplug.detection')
    monkeypatch.delattr(mocoplug, 'detection')


def assert_names_the_fix(error: BaseException) -> None:
    message = str(error)
    for command in SETUP_COMMANDS:
        assert f'`{command}`' in message, message
    assert 'mmcv._ext' in message  # what failed to load
    assert 'mmcv-lite' in message


def test_importing_detection_names_the_setup_command(without_mmcv_ops):
    with pytest.raises(MissingMMCVOpsError) as info:
        importlib.import_module('mocoplug.detection')
    assert_names_the_fix(info.value)
    # the original import error is kept as the cause, for the rare case
    # where the ops exist but do not load (an mmcv built for another torch)
    assert isinstance(info.value.__cause__, ImportError)
    assert 'mmcv._ext' in str(info.value.__cause__)


def test_detection_config_stops_with_it_not_with_a_pythonpath_hint(
        without_mmcv_ops):
    """Config.fromfile imports custom_imports and rewrites an ImportError
    into "set PYTHONPATH ...": the error must get through unchanged."""
    with pytest.raises(MissingMMCVOpsError) as info:
        Config.fromfile(VOC_C4)
    assert_names_the_fix(info.value)


def test_mmdet_train_tool_ends_with_the_error(tmp_path):
    """What a user of mmdet's packaged tools/train.py (what `mim train mmdet`
    runs) sees last: our error, not mmcv's."""
    train = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'train.py')
    script = (
        WITHOUT_OPS + 'import runpy\n'
        f'sys.argv = [{train!r}, {VOC_C4!r}, "--work-dir", '
        f'{str(tmp_path)!r}]\n'
        f'runpy.run_path({train!r}, run_name="__main__")\n')
    out = subprocess.run([sys.executable, '-c', script],
                         capture_output=True,
                         text=True,
                         cwd=ROOT)
    assert out.returncode == 1
    last_line = out.stderr.strip().splitlines()[-1]
    assert last_line.startswith('mocoplug.detection.mmcv_ops.'
                                'MissingMMCVOpsError: '), out.stderr[-3000:]
    assert_names_the_fix(last_line)
    assert not list(tmp_path.iterdir())  # stopped before any work
