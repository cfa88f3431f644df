"""``aten::floor`` and ``aten::floor.out``, which FlagGems 5.0 has only in place.

Vision preprocessing in Transformers (its interpolation taps) floors source coordinates
with ``torch.floor``. This kernel rounds each element toward negative infinity (in
float32 for half-precision inputs; the value is exact either way) and writes a result
laid out as the input where the input is dense, contiguous otherwise; integer
inputs are copied, as ATen copies them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._kernel_guards import is_dense
from ._results import into_out

__all__ = ["floor", "floor_out"]

_BLOCK = 1024


@triton.jit
def _floor_kernel(x_ptr, y_ptr, n, FP64: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if FP64:
        y = tl.floor(x)
    else:
        y = tl.floor(x.to(tl.float32))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def floor(input: torch.Tensor) -> torch.Tensor:
    """``torch.floor(input)``; NotImplemented for complex and bool inputs (ATen's error)."""
    if input.is_complex() or input.dtype == torch.bool:
        return NotImplemented
    if not input.dtype.is_floating_point:
        return input.clone()
    src = input if is_dense(input) else input.contiguous()
    out = torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device=src.device)
    n = src.numel()
    if n:
        _floor_kernel[(triton.cdiv(n, _BLOCK),)](src, out, n, FP64=src.dtype == torch.float64,
                                                 BLOCK=_BLOCK)
    return out


def floor_out(input: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """``torch.floor(input, out=out)``: the result above copied into ``out`` (resized as
    ATen resizes it); NotImplemented where ``out``'s dtype is not the input's."""
    if out.dtype != input.dtype:
        return NotImplemented
    return into_out(floor(input), out)
