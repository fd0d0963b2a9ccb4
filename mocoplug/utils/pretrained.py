# Copyright (c) mocoplug contributors. All rights reserved.
"""Route the one ``pretrained=...`` option of a config to its consumers.

mmengine resolves config variables when the file is read, so
``--cfg-options pretrained=PATH`` changes the top-level ``pretrained`` key
but not the ``init_cfg`` dicts that were written with ``pretrained`` as
their checkpoint. :func:`fill_pretrained`, called by ``MoCoRunner.from_cfg``
(the ``runner_type`` of mocoplug's configs, so every tool that builds the
runner with ``RUNNERS.build(cfg)`` applies it), copies the top-level value
into every ``init_cfg`` of mocoplug's ``Pretrained`` initialiser
(``type='Pretrained', _scope_='mocoplug'``) so that one option initialises
all of them (e.g. the backbone and the res5 shared head of a C4 detector).
"""
from typing import Any, List

from mmengine.config import Config


def _initializers(node: Any, found: List[dict]) -> List[dict]:
    if isinstance(node, dict):
        if node.get('type') == 'Pretrained' and \
                node.get('_scope_') == 'mocoplug':
            found.append(node)
        for value in node.values():
            _initializers(value, found)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _initializers(value, found)
    return found


def fill_pretrained(cfg: Config) -> int:
    """Copy ``cfg.pretrained`` into mocoplug's ``Pretrained`` init_cfgs.

    Args:
        cfg (Config): The config; changed in place.

    Returns:
        int: How many init_cfgs received the checkpoint (0 when
        ``cfg.pretrained`` is unset).
    """
    path = cfg.get('pretrained', None)
    if not path:
        return 0
    targets = _initializers(cfg.get('model', {}), [])
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
