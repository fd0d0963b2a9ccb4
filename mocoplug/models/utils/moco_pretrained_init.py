# Copyright (c) mocoplug contributors. All rights reserved.
import logging
from typing import Optional, Sequence

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model.weight_init import PretrainedInit, update_init_info

from mocoplug.registry import WEIGHT_INITIALIZERS
from .encoder_checkpoint import checkpoint_state, fit_layout, prefixes


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class MoCoPretrainedInit(PretrainedInit):
    """Initialise a module from the query encoder of a MoCo checkpoint, as
    `Momentum Contrast for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ (Sec. 4.2) transfers, by
    :func:`fit_layout` (every tensor at its shape, else ValueError).

    Args:
        checkpoint (str, optional): Checkpoint path (``pretrained`` fills it).
        prefix (str, optional): Key prefix tried first, removed
            (``'backbone.'``); None tries the known layouts only.
        keep_init (Sequence[str]): Prefixes of the module's keys that keep
            their init (the extra norm of a C4 res5 head).
        unread (Sequence[str]): Prefixes of checkpoint keys (prefix
            removed) meant for other modules (``layer4.`` of a C4 backbone).
        map_location (str): Device to load on.
    """

    def __init__(self,
                 checkpoint: Optional[str] = None,
                 prefix: Optional[str] = None,
                 keep_init: Sequence[str] = (),
                 unread: Sequence[str] = (),
                 map_location: str = 'cpu') -> None:
        self.checkpoint, self.prefix = checkpoint, prefix
        self.keep_init, self.unread = tuple(keep_init), tuple(unread)
        self.map_location = map_location

    def __call__(self, module: nn.Module) -> None:
        if not self.checkpoint:
            raise ValueError(
                'Pretrained: no checkpoint given; pass --cfg-options '
                'pretrained=PATH or set init_cfg.checkpoint. In your own '
                'script call `RUNNERS.build(cfg)`: Runner.from_cfg ignores '
                "the config's runner_type, which routes `pretrained`.")
        name = type(module).__name__
        what = f'Pretrained (init_cfg of {name}): {self.checkpoint!r}'
        state = checkpoint_state(self.checkpoint, 'init_cfg.checkpoint',
                                 self.map_location)
        try:
            layout, loaded = fit_layout(state, module, what, self.prefix,
                                        self.keep_init, self.unread)
        except ValueError as error:
            raise ValueError(
                f'{error} To start part of the module only, state it in '
                'its init_cfg: keep_init=[module key prefixes that keep '
                'their init], unread=[checkpoint key prefixes meant for '
                'other modules].') from None
        module.load_state_dict(loaded, strict=False)
        kept = [k for k in module.state_dict() if k.startswith(self.keep_init)]
        left = [
            k for k in state if k.startswith(layout[1])
            and k[len(layout[1]):].startswith(self.unread)
        ]
        print_log(
            f'Pretrained: {name} loaded {len(loaded)}/'
            f'{len(module.state_dict())} tensors from {self.checkpoint} '
            f'({layout[0]}, prefix {layout[1]!r})' +
            (f'; kept their init (keep_init): {prefixes(kept, 1)}' if kept else
             '') + (f'; left for other modules (unread): {prefixes(left, 2)}'
                    if left else ''),
            logger='current',
            level=logging.INFO)
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())

    def _get_init_info(self) -> str:
        return (f'{self.__class__.__name__}: load {self.prefix or ""}* from '
                f'{self.checkpoint}')
