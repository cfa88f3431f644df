"""What the own kernels share about results: the dtype ATen accumulates integers in, and
writing a computed result into an ``out=`` tensor as ATen does."""

from __future__ import annotations

import torch

__all__ = ["integer_result_dtype", "into_out"]


def integer_result_dtype(inp: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype | None:
    """The dtype ATen sums or multiplies an integer or bool ``inp`` in (int64, or the
    integer ``dtype`` asked for); None for floating and complex inputs and for a floating,
    complex or bool ``dtype``."""
    if not isinstance(inp, torch.Tensor) or inp.dtype.is_floating_point or inp.is_complex():
        return None
    target = torch.int64 if dtype is None else dtype
    if target.is_floating_point or target.is_complex or target == torch.bool:
        return None
    return target


def into_out(result: torch.Tensor | object, out: torch.Tensor) -> torch.Tensor | object:
    """``out`` holding ``result`` (resized as ATen resizes an ``out=`` tensor), or
    NotImplemented where the kernel declined the call."""
    if result is NotImplemented:
        return result
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)
