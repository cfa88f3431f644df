"""``aten::prod`` and ``aten::prod.dim_int`` of integer and bool tensors.

ATen multiplies integers and bools in int64 (or the integer ``dtype`` asked for, with
which products wrap as they do in int64 and then the narrower type); FlagGems 5.0
multiplies in float32 whatever the dtype, exact only below 2**24, and its guard declines
those calls. This kernel multiplies each row (the reduced dimension moved last and made
contiguous, on the device) in int64. A vision-language model's patch counts
(``grid_thw.prod(-1)``) are such a call. The blocks a row takes are a compile-time count:
Triton's interpreter cannot loop to a bound given at run time with NumPy 2.4.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._results import integer_result_dtype

__all__ = ["prod", "prod_dim"]

_BLOCK = 256


@triton.jit
def _multiply(a, b):
    return a * b


@triton.jit
def _prod_rows_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.full((BLOCK,), 1, tl.int64)
    for i in range(ITERS):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        acc *= tl.load(x_ptr + row * n + offs, mask=offs < n, other=1).to(tl.int64)
    tl.store(y_ptr + row, tl.reduce(acc, 0, _multiply).to(y_ptr.dtype.element_ty))


def _prod_rows(rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The product of each row of the 2-d ``rows``, in ``dtype``."""
    m, n = rows.shape
    rows = rows.contiguous()
    out = torch.empty(m, dtype=dtype, device=rows.device)
    if m:
        _prod_rows_kernel[(m,)](rows, out, n, BLOCK=_BLOCK, ITERS=max(triton.cdiv(n, _BLOCK), 1))
    return out


def prod(inp: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.prod(inp, dtype=dtype)`` of an integer or bool ``inp``; NotImplemented for
    floating ones (FlagGems' own prod serves those) and floating ``dtype``."""
    target = integer_result_dtype(inp, dtype)
    if target is None:
        return NotImplemented
    return _prod_rows(inp.reshape(1, -1), target).reshape(())


def prod_dim(inp: torch.Tensor, dim: int, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.prod(inp, dim, keepdim, dtype=dtype)`` of an integer or bool ``inp``;
    NotImplemented as :func:`prod`, and for a ``dim`` out of range (ATen's error, from the
    next provider)."""
    target = integer_result_dtype(inp, dtype)
    rank = max(inp.dim(), 1)
    if target is None or not -rank <= dim < rank:
        return NotImplemented
    if inp.dim() == 0:
        return inp.to(target, copy=True)
    dim %= inp.dim()
    moved = inp.movedim(dim, -1)
    rows = moved.reshape(moved.shape[:-1].numel(), inp.shape[dim])
    out = _prod_rows(rows, target).reshape(moved.shape[:-1])
    return out.unsqueeze(dim) if keepdim else out
