# Copyright (c) mocoplug contributors. All rights reserved.
"""tools/benchmarks/benchmark.py: one command that hands each sub-command
its options, run as users type it from the repository root."""
import os
import os.path as osp
import subprocess
import sys

import pytest

ROOT = osp.dirname(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))


def test_every_command_has_its_module_with_a_main(load_tool):
    cli = load_tool('benchmarks/benchmark')
    for command in cli.COMMANDS:
        module = cli.command_module(command)
        assert module.__name__ == 'benchmarks.' + command.replace('-', '_')
        assert callable(module.main)


def test_options_reach_the_command(load_tool, monkeypatch):
    cli = load_tool('benchmarks/benchmark')
    module = cli.command_module('knn')
    seen = []
    monkeypatch.setattr(module, 'main', seen.append)
    cli.main(['knn', '--bank', '10', '--topk', '1', '2'])
    assert seen == [['--bank', '10', '--topk', '1', '2']]


def test_unknown_command_names_the_choices(load_tool):
    cli = load_tool('benchmarks/benchmark')
    with pytest.raises(ValueError, match='unknown benchmark .*momentum-upd'):
        cli.command_module('speed')


def test_runs_as_a_script_from_the_repository_root():
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([
        sys.executable, 'tools/benchmarks/benchmark.py', 'momentum-update',
        '--help'
    ],
                         cwd=ROOT,
                         env=env,
                         capture_output=True,
                         text=True,
                         check=True).stdout
    assert out.startswith('usage: benchmark.py momentum-update')
    assert '--repeats' in out


def test_a_failed_row_is_a_non_zero_exit(load_tool, monkeypatch):
    """detection-zoo reports a failed config in its row; the command
    exited 0 all the same."""
    cli = load_tool('benchmarks/benchmark')
    module = cli.command_module('detection-zoo')
    rows = [dict(config='a.py', status='ok'), dict(config='b.py', status='ok')]
    monkeypatch.setattr(module, 'main', lambda argv: dict(rows=rows))
    assert cli.main(['detection-zoo'])['rows'] == rows
    rows[1]['status'] = 'kernel `nms` not served'
    with pytest.raises(SystemExit, match='1 of 2 rows failed: b.py') as info:
        cli.main(['detection-zoo'])
    assert info.value.code != 0
