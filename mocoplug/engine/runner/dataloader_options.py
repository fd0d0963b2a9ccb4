# Copyright (c) mocoplug contributors. All rights reserved.
"""Dataloader config entries mmengine 0.10.7 cannot build as written."""
import copy


def without_idle_persistent_workers(dataloader_cfg: dict) -> dict:
    """The dataloader config (a copy if changed), with ``persistent_workers``
    off without workers (which torch's ``DataLoader`` refuses)."""
    if dataloader_cfg.get('persistent_workers') and not dataloader_cfg.get(
            'num_workers', 0):
        dataloader_cfg = copy.copy(dataloader_cfg)
        dataloader_cfg['persistent_workers'] = False
    return dataloader_cfg


def without_collate_scope(dataloader_cfg: dict) -> dict:
    """The dataloader config (a copy if changed), without the ``_scope_``
    key mmengine tags an inherited ``collate_fn`` with, then passes to the
    function."""
    collate_fn = dataloader_cfg.get('collate_fn')
    if isinstance(collate_fn, dict) and '_scope_' in collate_fn:
        kept = {k: v for k, v in collate_fn.items() if k != '_scope_'}
        dataloader_cfg = copy.copy(dataloader_cfg)
        dataloader_cfg['collate_fn'] = kept
    return dataloader_cfg
