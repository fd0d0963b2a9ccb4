# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug's benchmarks, one command with a sub-command per measurement.

Each is ``tools/benchmarks/<command>.py`` (dashes as underscores)."""
import argparse
import importlib
import os.path as osp
import sys
from typing import Any, List, Optional

TOOLS = osp.dirname(osp.dirname(osp.abspath(__file__)))
if TOOLS not in sys.path:  # makes ``benchmarks`` importable as a package
    sys.path.append(TOOLS)  # last: tools/test.py must not hide stdlib test

COMMANDS = {
    'train': 'one training step: mocoplug, mmpretrain and the floor',
    'pipeline': 'the CPU data pipeline per image against the official one',
    'device-augment': 'two-view augmentation on the device against workers',
    'detection-ops': "detector step, served mmcv ops against compiled mmcv's",
    'detection-zoo': "mmdet's model zoo: a train step and a test pass each",
    'hook-cost': 'cost of the health and non-finite hooks per iteration',
    'knn': 'weighted kNN evaluation at ImageNet size',
    'lars': 'MoCoV3LARS step against mmpretrain LARS',
    'memory': 'resident memory over a long run (leak check)',
    'momentum-update': "MomentumUpdateHook against mmengine's EMA",
}


def command_module(command: str):
    """The module of a sub-command, e.g. ``benchmarks.device_augment``."""
    if command not in COMMANDS:
        raise ValueError(f'unknown benchmark {command!r}; choose from '
                         f'{", ".join(COMMANDS)}')
    return importlib.import_module('benchmarks.' + command.replace('-', '_'))


def main(argv: Optional[List[str]] = None) -> Any:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='commands:\n' + '\n'.join(f'  {name:18} {text}'
                                         for name, text in COMMANDS.items()))
    parser.add_argument('command', choices=COMMANDS, metavar='COMMAND')
    parser.add_argument(
        'options',
        nargs=argparse.REMAINDER,
        help="the command's options (COMMAND --help lists them)")
    args = parser.parse_args(argv)
    result = command_module(args.command).main(args.options)
    rows = result.get('rows', []) if isinstance(result, dict) else []
    failed = [r for r in rows if r.get('status', 'ok') != 'ok']
    if failed:  # printed and written; the exit status says it too
        raise SystemExit(f'{args.command}: {len(failed)} of {len(rows)} rows '
                         'failed: ' + ', '.join(
                             str(r.get('config', r)) for r in failed[:5]))
    return result


if __name__ == '__main__':
    main()
