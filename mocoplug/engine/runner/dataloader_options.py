# Copyright (c) mocoplug contributors. All rights reserved.
"""Dataloader config entries mmengine 0.10.7 cannot build as written."""
import copy


def without_idle_persistent_workers(dataloader_cfg: dict) -> dict:
    """The dataloader config (a copy if changed), with ``persistent_workers``
    off without workers (torch's ``DataLoader`` refuses it; mmpretrain's
    ``tools/train.py`` sets it everywhere)."""
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
        dataloader_cfg = copy.copy(dataloader_cfg)
        dataloader_cfg['collate_fn'] = {
            key: value
            for key, value in collate_fn.items() if key != '_scope_'
        }
    return dataloader_cfg
