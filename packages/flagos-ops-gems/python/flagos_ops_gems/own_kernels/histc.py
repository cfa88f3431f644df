"""``aten::histc``, which FlagGems 5.0 lacks.

A mixture-of-experts layer in Transformers counts the tokens routed to each expert with
``torch.histc`` of the int32 expert ids (``bins`` = experts). Each element in
``[min, max]`` is counted in bin ``(x - min) * bins / (max - min)`` (the last bin also
takes ``x == max``) as ATen's CUDA kernel computes it: in integer arithmetic for integer
inputs, in float64 for float64 ones (the range read from memory: Triton passes float
scalars as float32) and in float32 for the other floating ones. Where ``min == max`` the input's own extremes are
the range (read back to the host, as ATen does), widened by one each way where they are
equal too. Elements outside the range and NaNs are not counted. The counts are summed
with atomic adds into int32 and returned in the input's dtype.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["histc"]

_BLOCK = 1024
_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int8,
           torch.int16, torch.int32, torch.int64)


@triton.jit
def _histc_kernel(x_ptr, counts_ptr, bounds_ptr, n, lo, hi, bins, INTEGRAL: tl.constexpr,
                  FP64: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    if INTEGRAL:
        v = tl.load(x_ptr + offs, mask=inside, other=0).to(tl.int64)
        counted = inside & (v >= lo) & (v <= hi)
        v = tl.where(counted, v, lo)
        b = (v - lo) * bins // (hi - lo)
    elif FP64:  # the range as float64 values in memory: Triton passes float scalars as fp32
        lo64 = tl.load(bounds_ptr)
        hi64 = tl.load(bounds_ptr + 1)
        v = tl.load(x_ptr + offs, mask=inside, other=0).to(tl.float64)
        counted = inside & (v >= lo64) & (v <= hi64)
        v = tl.where(counted, v, lo64)
        b = ((v - lo64) * bins / (hi64 - lo64)).to(tl.int64)
    else:
        v = tl.load(x_ptr + offs, mask=inside, other=0).to(tl.float32)
        counted = inside & (v >= lo) & (v <= hi)  # false for NaN
        v = tl.where(counted, v, lo)
        b = ((v - lo) * bins / (hi - lo)).to(tl.int64)
    b = tl.where(b >= bins, bins - 1, b)
    tl.atomic_add(counts_ptr + b, tl.full(b.shape, 1, tl.int32), mask=counted)


def histc(input: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    """``torch.histc(input, bins, min, max)``; NotImplemented for bool and complex inputs
    and for the arguments ATen rejects (its error, from the next provider)."""
    if input.dtype not in _DTYPES or bins <= 0:
        return NotImplemented
    integral = not input.dtype.is_floating_point
    cast = int if integral else float
    lo, hi = cast(min), cast(max)
    if lo == hi and input.numel() > 0:
        lo, hi = (cast(v.item()) for v in torch.aminmax(input))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi or not (math.isfinite(lo) and math.isfinite(hi)):
        return NotImplemented
    counts = torch.zeros(bins, dtype=torch.int32, device=input.device)
    x = input.reshape(-1)
    if not x.is_contiguous():
        x = x.contiguous()
    n = x.numel()
    fp64 = input.dtype == torch.float64
    if n:
        bounds = (torch.tensor([lo, hi], dtype=torch.float64).to(input.device) if fp64
                  else counts)
        _histc_kernel[(triton.cdiv(n, _BLOCK),)](x, counts, bounds, n, lo, hi, bins,
                                                 INTEGRAL=integral, FP64=fp64, BLOCK=_BLOCK)
    return counts.to(input.dtype)
