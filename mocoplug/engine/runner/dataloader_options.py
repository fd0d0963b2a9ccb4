# Copyright (c) mocoplug contributors. All rights reserved.
"""Dataloader config entries mmengine 0.10.7 cannot build as written."""
import copy


def without_idle_persistent_workers(dataloader_cfg: dict) -> dict:
    """The dataloader config, with ``persistent_workers`` off when it has
    no worker processes.

    torch's ``DataLoader`` refuses ``persistent_workers=True`` with
    ``num_workers=0`` (``ValueError``). mmpretrain's ``tools/train.py``
    sets ``persistent_workers=True`` in every dataloader, and the demo's
    config loads in the main process (``num_workers=0``); with no worker
    there is nothing to keep alive, so the option means nothing there.

    Args:
        dataloader_cfg (dict): A dataloader config.

    Returns:
        dict: The same dict when nothing changes, otherwise a copy.
    """
    if dataloader_cfg.get('persistent_workers') and not dataloader_cfg.get(
            'num_workers', 0):
        dataloader_cfg = copy.copy(dataloader_cfg)
        dataloader_cfg['persistent_workers'] = False
    return dataloader_cfg


def without_collate_scope(dataloader_cfg: dict) -> dict:
    """The dataloader config, without the ``_scope_`` key mmengine tags an
    inherited ``collate_fn`` with.

    A config that inherits through ``mmpretrain::`` or ``mocoplug::`` gets
    ``_scope_`` in every dict of its base; mmengine passes all keys of
    ``collate_fn`` but ``type`` to the function, which fails on
    ``_scope_``. The collate functions are not registry-scoped, so the key
    means nothing there.

    Args:
        dataloader_cfg (dict): A dataloader config.

    Returns:
        dict: The same dict when nothing changes, otherwise a copy.
    """
    collate_fn = dataloader_cfg.get('collate_fn')
    if isinstance(collate_fn, dict) and '_scope_' in collate_fn:
        dataloader_cfg = copy.copy(dataloader_cfg)
        dataloader_cfg['collate_fn'] = {
            key: value
            for key, value in collate_fn.items() if key != '_scope_'
        }
    return dataloader_cfg
