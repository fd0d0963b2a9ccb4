# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Dict, Optional

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model.weight_init import PretrainedInit, update_init_info
from mmengine.runner.checkpoint import _load_checkpoint

from mocoplug.registry import WEIGHT_INITIALIZERS
from .encoder_checkpoint import _under, prefixes


# Named 'Pretrained' on purpose: mmpretrain's backbones skip their own
# re-initialisation only for that type (`_scope_='mocoplug'` selects it).
@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class MoCoPretrainedInit(PretrainedInit):
    """Initialise a module from the query encoder of a MoCo checkpoint, as
    `Momentum Contrast for Unsupervised Visual Representation Learning
    <https://arxiv.org/abs/1911.05722>`_ (Sec. 4.2) transfers; logs what it
    loaded and skipped, raises when the module receives none of its tensors.

    Args:
        checkpoint (str): Path of the checkpoint (``pretrained`` fills it).
        prefix (str, optional): Key prefix of the tensors to load, removed
            (``'module.encoder_q.'`` for the official checkpoints); None loads
            every key, less a leading ``module.``.
        map_location (str): Device to load on.
    """

    def __init__(self,
                 checkpoint: Optional[str] = None,
                 prefix: Optional[str] = None,
                 map_location: str = 'cpu') -> None:
        self.checkpoint = checkpoint
        self.prefix = prefix
        self.map_location = map_location

    def select(self,
               state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The tensors under ``prefix``, with the prefix removed."""
        if self.prefix is None:
            return {
                (k[7:] if k.startswith('module.') else k): v
                for k, v in state_dict.items()
            }
        return _under(state_dict, self.prefix)

    def __call__(self, module: nn.Module) -> None:
        if not self.checkpoint:
            raise ValueError(
                'Pretrained: no checkpoint given; pass --cfg-options '
                'pretrained=PATH or set init_cfg.checkpoint. In your own '
                'script call `RUNNERS.build(cfg)`: Runner.from_cfg ignores '
                "the config's runner_type, which routes `pretrained`.")
        ckpt = _load_checkpoint(
            self.checkpoint, map_location=self.map_location)
        state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) \
            else None
        if not isinstance(state, dict):
            raise ValueError(f'Pretrained: {self.checkpoint} holds no state '
                             'dict')
        source = self.select(state)
        if not source:
            raise ValueError(
                f'Pretrained: {self.checkpoint} has no keys under '
                f'{self.prefix!r}, only {prefixes(list(state), 1)}; set '
                "init_cfg.prefix (official MoCo: 'module.encoder_q.').")
        target = module.state_dict()
        loaded = {
            k: v
            for k, v in source.items()
            if k in target and v.shape == target[k].shape
        }
        mismatched = [k for k in source if k in target and k not in loaded]
        missing = [k for k in target if k not in loaded]
        unexpected = [k for k in source if k not in target]
        name = type(module).__name__
        if not loaded:
            raise RuntimeError(
                f'Pretrained: {name} received none of its {len(target)} '
                f'tensors from {self.checkpoint} (prefix {self.prefix!r}; '
                f'checkpoint: {prefixes(list(source), 1)}; module: '
                f'{prefixes(list(target), 1)}); set init_cfg.prefix.')
        module.load_state_dict(loaded, strict=False)
        report = [
            f'Pretrained: {name} loaded {len(loaded)}/{len(target)} tensors '
            f'from {self.checkpoint} (prefix {self.prefix!r})'
        ]
        if missing:
            report.append(
                f'  missing (kept their init): {prefixes(missing, 1)}')
        if unexpected:
            report.append('  unexpected (in the checkpoint, not in '
                          f'{name}): {prefixes(unexpected, 1)}')
        if mismatched:
            report.append(f'  shape mismatch (skipped): {mismatched}')
        print_log('\n'.join(report), logger='current')
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())

    def _get_init_info(self) -> str:
        return (f'{self.__class__.__name__}: load {self.prefix or ""}* from '
                f'{self.checkpoint}')
