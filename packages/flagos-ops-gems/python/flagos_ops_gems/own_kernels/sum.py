"""``aten::sum`` and ``aten::sum.dim_IntList`` of integer and bool tensors.

ATen sums integers and bools in int64 (or the ``dtype`` asked for); FlagGems 5.0 sums
them in the input's own dtype, so a bool mask's count saturates and an int8 sum
overflows. This kernel casts the input to the dtype ATen accumulates in and hands it to
FlagGems' own ``sum``, which sums a tensor in its dtype (the cast is ``_to_copy``, served
on the device).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._results import integer_result_dtype

__all__ = ["sum"]


def sum(library_sum: Callable[..., torch.Tensor], inp: torch.Tensor, *args: object,
        dtype: torch.dtype | None = None, **kwargs: object) -> torch.Tensor:
    """``torch.sum(inp, *args, dtype=dtype)`` of an integer or bool ``inp`` as ATen computes
    it; NotImplemented for floating and complex inputs (FlagGems' own sum serves those) and
    for a floating ``dtype``."""
    target = integer_result_dtype(inp, dtype)
    if target is None or kwargs.get("out") is not None:
        return NotImplemented
    return library_sum(inp.to(target), *args, dtype=target, **kwargs)
