"""``aten::cat`` of tensors of several dtypes, or of one tensor beside legacy empty ones.

FlagGems 5.0's ``cat`` drops 1-d empty tensors (ATen's legacy "no data" inputs, which a
key-value cache starts as) and then returns a lone remaining tensor itself, where ATen
returns a new one; with mixed dtypes it takes the first tensor's. This kernel promotes
the dtypes as ATen does, copies a lone tensor, and hands several tensors of one dtype to
FlagGems' own ``cat`` (the case it computes as ATen does). Casts and copies are ops of
their own (``_to_copy``, ``copy_``), served on the device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

__all__ = ["cat"]


def _legacy_empty(t: torch.Tensor) -> bool:
    return t.dim() == 1 and t.numel() == 0


def cat(library_cat: Callable[..., torch.Tensor], tensors: Sequence[torch.Tensor],
        dim: int = 0) -> torch.Tensor:
    """``torch.cat(tensors, dim)`` as ATen computes it, FlagGems' ``library_cat`` doing the
    concatenation of several tensors; NotImplemented for a call it does not take (no
    tensors, tensors on several devices)."""
    if not tensors or any(t.device != tensors[0].device for t in tensors):
        return NotImplemented
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
    kept = [t if t.dtype == dtype else t.to(dtype) for t in tensors if not _legacy_empty(t)]
    if not kept:
        return torch.empty(0, dtype=dtype, device=tensors[0].device)
    if len(kept) > 1:
        return library_cat(kept, dim)
    (t,) = kept
    if not -t.dim() <= dim < max(t.dim(), 1):
        return NotImplemented  # ATen's own error, from the next provider
    channels_last = t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(
        memory_format=torch.channels_last)
    return t.clone(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
