# Copyright (c) mocoplug contributors. All rights reserved.
"""Fail early, naming the fix, when mmcv's compiled ops are missing.

mmdet's detectors run mmcv's compiled ops (``RoIAlign``, ``nms``, ...) from
the extension module ``mmcv._ext``. mmcv-lite, which ``make setup``
installs for pretraining and evaluation, is the same Python code without
that module; with it, mmdet stops deep inside its model registry with
``No module named 'mmcv._ext'``. ``require_mmcv_ops`` turns that into one
error that says what is missing and which command installs it.
"""
from importlib import import_module

SETUP_COMMAND = 'make setup-full'
SETUP_SCRIPT_COMMAND = 'bash tools/setup_env.sh --with-ops'


class MissingMMCVOpsError(RuntimeError):
    """mmcv's compiled ops do not load, and detection needs them.

    A ``RuntimeError`` rather than an ``ImportError`` on purpose: mmengine's
    ``Config.fromfile`` rewrites an ``ImportError`` from ``custom_imports``
    into "set PYTHONPATH to include the directory of your custom module",
    which would hide the fix this error names.
    """


def require_mmcv_ops() -> None:
    """Raise :class:`MissingMMCVOpsError` unless ``mmcv._ext`` imports.

    The probe is the import that mmcv's own op loader performs, so it fails
    for mmcv-lite (no such module) and for a full mmcv built against another
    torch (undefined symbols) alike.

    Raises:
        MissingMMCVOpsError: with the original import error as its cause.
    """
    try:
        import_module('mmcv._ext')
    except ImportError as error:
        raise MissingMMCVOpsError(
            "Detection needs mmcv's compiled ops (mmdet's detectors call "
            'mmcv.ops: RoIAlign, nms, ...), and they do not load here '
            f'({error}): this environment has mmcv-lite, or an mmcv built '
            'for another torch. Pretraining, evaluation and the demo do not '
            f'need them. Run `{SETUP_COMMAND}` (or `{SETUP_SCRIPT_COMMAND}`): '
            "it replaces mmcv-lite with mmcv 2.1.0 with ops in the set-up's "
            'environment (.venv, or MOCOPLUG_VENV), from a wheel in '
            'PIP_FIND_LINKS if one is offered, else compiled once (about 15 '
            'min on 2 cores) and cached.') from error
