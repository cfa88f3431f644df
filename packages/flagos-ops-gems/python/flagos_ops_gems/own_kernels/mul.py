"""``aten::mul.Tensor`` for floating operands of any strides and broadcast shapes.

FlagGems 5.0's Hopper ``mul`` reads both operands flat, as if each were dense and of the
result's shape; this kernel reads each through its own strides (0 along broadcast
dimensions) and writes a result laid out as ATen lays it out for the common cases (the
layout of an operand of the result's shape, else contiguous). Products are taken in
float32 for float16 and bfloat16, as ATen's CUDA kernels do.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._kernel_guards import is_dense
from ._strided import merged_layout, unravel4

__all__ = ["mul"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BLOCK = 1024


@triton.jit
def _mul_kernel(a_ptr, b_ptr, out_ptr, n, s1, s2, s3, a0, a1, a2, a3, b0, b1, b2, b3,
                o0, o1, o2, o3, COMPUTE_FP64: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i0, i1, i2, i3 = unravel4(offs, s1, s2, s3)
    a = tl.load(a_ptr + i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3, mask=mask)
    b = tl.load(b_ptr + i0 * b0 + i1 * b1 + i2 * b2 + i3 * b3, mask=mask)
    if COMPUTE_FP64:
        prod = a.to(tl.float64) * b.to(tl.float64)
    else:
        prod = a.to(tl.float32) * b.to(tl.float32)
    tl.store(out_ptr + i0 * o0 + i1 * o1 + i2 * o2 + i3 * o3,
             prod.to(out_ptr.dtype.element_ty), mask=mask)


def _result(a: torch.Tensor, b: torch.Tensor, shape: torch.Size, dtype: torch.dtype
            ) -> torch.Tensor:
    for t in (a, b):
        if t.shape == shape and is_dense(t):
            return torch.empty_like(t, dtype=dtype)
    return torch.empty(shape, dtype=dtype, device=a.device)


def mul(a: object, b: object) -> torch.Tensor:
    """``a * b`` as ATen computes it, or NotImplemented for a call this kernel does not
    take (a Python scalar, operands on different devices, a dtype other than float16,
    bfloat16, float32 and float64, more than four dimensions after merging)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return NotImplemented
    if a.device != b.device or a.dtype not in _DTYPES or b.dtype not in _DTYPES:
        return NotImplemented
    dtype = torch.result_type(a, b)
    shape = torch.broadcast_shapes(a.shape, b.shape)
    ea, eb = a.expand(shape), b.expand(shape)
    out = _result(a, b, shape, dtype)
    layout = merged_layout(shape, [ea.stride(), eb.stride(), out.stride()])
    if layout is None:
        return NotImplemented
    n = out.numel()
    if n == 0:
        return out
    (_, s1, s2, s3), (sa, sb, so) = layout.sizes, layout.strides
    _mul_kernel[(triton.cdiv(n, _BLOCK),)](
        ea, eb, out, n, s1, s2, s3, *sa, *sb, *so,
        COMPUTE_FP64=dtype == torch.float64, BLOCK=_BLOCK)
    return out
