# Copyright (c) mocoplug contributors. All rights reserved.
"""Route the one ``pretrained=...`` option of a config to its consumers.

mmengine resolves config variables when the file is read, so
``--cfg-options pretrained=PATH`` does not reach the ``init_cfg`` dicts
written with ``pretrained``; :func:`fill_pretrained`, called by
``MoCoRunner.from_cfg``, copies it there.
"""
from mmengine.config import Config

from .walk_dicts import walk_dicts


def fill_pretrained(cfg: Config) -> int:
    """Copy ``cfg.pretrained``, if set, into every init_cfg of mocoplug's
    ``Pretrained`` initialiser (``_scope_='mocoplug'``) of the model (in
    place); returns how many received it."""
    path = cfg.get('pretrained', None)
    if not path:
        return 0
    targets = []

    def collect(node: dict) -> None:
        if node.get('type') == 'Pretrained' and \
                node.get('_scope_') == 'mocoplug':
            targets.append(node)

    walk_dicts(cfg.get('model', {}), collect)
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
