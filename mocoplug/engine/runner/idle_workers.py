# Copyright (c) mocoplug contributors. All rights reserved.
"""Dataloader options that cannot hold with the config's worker count."""
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
