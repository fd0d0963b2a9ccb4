# Copyright (c) mocoplug contributors. All rights reserved.
"""What mocoplug's configs mean beyond mmengine 0.10.7's: ``pretrained=...``
routed to its ``init_cfg`` dicts (mmengine resolves variables when the file
is read) and ``default_hooks.NAME=None`` for mocoplug's default hooks too
(mmengine accepts None only for its own)."""
import argparse
import os
from typing import Any, Callable, Dict

from mmengine.config import Config, DictAction

# The names Runner.register_default_hooks knows (mmengine 0.10.7).
MMENGINE_DEFAULT_HOOKS = ('runtime_info', 'timer', 'sampler_seed', 'logger',
                          'param_scheduler', 'checkpoint')


def walk_dicts(node: Any, fn: Callable[[dict], None]) -> None:
    """Call ``fn`` on every dict inside ``node`` (a config or part of one),
    nested dicts, lists and tuples included, parents before children."""
    if isinstance(node, dict):
        fn(node)
        for value in node.values():
            walk_dicts(value, fn)
    elif isinstance(node, (list, tuple)):
        for value in node:
            walk_dicts(value, fn)


def fill_pretrained(cfg: Config) -> int:
    """Copy ``cfg.pretrained``, if set, into the model's init_cfgs of
    mocoplug's ``Pretrained`` (in place); returns how many received it."""
    path = cfg.get('pretrained', None)
    if not path:
        return 0
    nodes = []
    walk_dicts(cfg.get('model', {}), nodes.append)
    targets = [
        n for n in nodes
        if n.get('type') == 'Pretrained' and n.get('_scope_') == 'mocoplug'
    ]
    if not targets:
        raise ValueError(
            f'pretrained={path!r} was given, but the model has no init_cfg '
            "of mocoplug's Pretrained initialiser to receive it. Use a "
            'config from configs/benchmarks/ or configs/detection/, or add '
            "init_cfg=dict(type='Pretrained', _scope_='mocoplug', "
            "checkpoint=pretrained, prefix='backbone.') to the backbone.")
    for init_cfg in targets:
        init_cfg['checkpoint'] = path
    return len(targets)


def enabled_default_hooks(hooks: Dict) -> Dict:
    """A copy of ``hooks`` (a config's ``default_hooks``) without the None
    entries mmengine would refuse (its own names are left to it)."""
    return {
        name: hook
        for name, hook in hooks.items()
        if hook is not None or name in MMENGINE_DEFAULT_HOOKS
    }


def parse_launch_args(parser: argparse.ArgumentParser,
                      argv=None) -> argparse.Namespace:
    """Add ``--cfg-options``, ``--launcher``, ``--local-rank`` to ``parser``
    (the tools' launch options) and parse ``argv``."""
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='key=value overrides of the config')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args
