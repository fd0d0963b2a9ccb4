# Copyright (c) mocoplug contributors. All rights reserved.
"""Run the tools that mmpretrain and mmdet ship (``<package>/.mim/tools/``,
what ``mim train``/``mim test`` run) as a user runs them, in this process,
and keep the runners they built."""
import importlib
import os.path as osp
import runpy
import sys
from typing import List

from mocoplug.engine.runner import MoCoRunner


def packaged_tool(package: str, name: str) -> str:
    """The path of ``<package>/.mim/tools/<name>.py`` as installed."""
    root = osp.dirname(importlib.import_module(package).__file__)
    path = osp.join(root, '.mim', 'tools', f'{name}.py')
    assert osp.isfile(path), path
    return path


def run_packaged_tool(monkeypatch, package: str, name: str,
                      argv: List[str]) -> List[MoCoRunner]:
    """``python <package>/.mim/tools/<name>.py *argv``, in this process.

    Returns:
        list: The MoCoRunners whose ``train()`` or ``test()`` the tool
        called (none if it built mmengine's plain Runner).
    """
    runners = []
    for method in ('train', 'test'):
        original = getattr(MoCoRunner, method)

        def spy(self, _original=original):
            runners.append(self)
            return _original(self)

        monkeypatch.setattr(MoCoRunner, method, spy)
    path = packaged_tool(package, name)
    monkeypatch.setattr(sys, 'argv', [path, *argv])
    monkeypatch.setenv('LOCAL_RANK', '0')  # the tools set it if unset
    runpy.run_path(path, run_name='__main__')
    return runners
