# Copyright (c) mocoplug contributors. All rights reserved.
"""The precision of MoCo's similarities: at least float32, never lower."""
import torch


def similarity_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype similarities between ``tensors`` are computed in: the
    widest of their dtypes and float32.

    bfloat16 / float16 embeddings (autocast) are promoted to float32, so
    ``q.k / tau`` neither overflows nor loses the few bits that ``1 / tau``
    amplifies; float32 stays float32 and a float64 model (``.double()``)
    stays float64. Nothing is ever cast to a lower precision.
    """
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 or wider (see :func:`similarity_dtype`): bfloat16
    and float16 become float32, float32 and float64 are returned as they
    are (no copy)."""
    return x.to(similarity_dtype(x))
