# Copyright (c) mocoplug contributors. All rights reserved.
"""The precision of MoCo's similarities: at least float32, never lower."""
import torch


def similarity_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype similarities between ``tensors`` are computed in: the
    widest of their dtypes and float32 (docs/design_notes.md#precision)."""
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 or wider (float32 and float64: no copy)."""
    return x.to(similarity_dtype(x))
