# Copyright (c) mocoplug contributors. All rights reserved.
"""Keep ``import mmpretrain.models`` working under transformers 5, whose
moved names break mmpretrain 1.2's multimodal models (unused by MoCo)."""
import sys
import warnings


def skip_broken_multimodal() -> None:
    """Turn mmpretrain's ``WITH_MULTIMODAL`` off where its models would not
    import. Must run before ``mmpretrain.models``."""
    if 'mmpretrain.models' in sys.modules:
        return
    from mmpretrain.utils import dependency
    if not dependency.WITH_MULTIMODAL:
        return
    try:  # what mmpretrain's BLIP imports
        from transformers.modeling_utils import (  # noqa: F401
            PreTrainedModel, apply_chunking_to_forward,
            find_pruneable_heads_and_indices, prune_linear_layer)
    except Exception as exc:  # noqa: BLE001  (any failure breaks mmpretrain)
        dependency.WITH_MULTIMODAL = False
        warnings.warn(f'mocoplug: mmpretrain 1.2\'s multimodal models fail '
                      f'to import ({exc!r}); they are left out (MoCo does '
                      'not use them). Use transformers<5 to have them.')
