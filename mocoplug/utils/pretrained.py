# Copyright (c) mocoplug contributors. All rights reserved.
"""Route a config's ``pretrained=...`` option to its ``init_cfg`` dicts
(mmengine resolves variables when the file is read)."""
from mmengine.config import Config

from .walk_dicts import walk_dicts


def fill_pretrained(cfg: Config) -> int:
    """Copy ``cfg.pretrained``, if set, into the model's init_cfgs of
    mocoplug's ``Pretrained`` (in place); returns how many received it."""
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
