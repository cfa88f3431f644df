"""``aten::slice_backward`` for a gradient of any strides.

The gradient of ``x[..., start:end:step, ...]`` (along ``dim``) is ``grad`` at the sliced
positions and zero elsewhere, in a fresh contiguous tensor of the input's sizes. FlagGems
5.0's kernel reads ``grad`` as contiguous; a rotary embedding's half (``x[..., :d // 2]``)
gives it a view. This kernel writes every element of the result in one pass, reading
``grad`` through its own strides.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from ._strided import merged_layout, unravel4

__all__ = ["slice_backward"]

_BLOCK = 1024


@triton.jit
def _slice_backward_kernel(grad_ptr, out_ptr, n, s1, s2, s3, g0, g1, g2, g3, start, step, count,
                           DIM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i0, i1, i2, i3 = unravel4(offs, s1, s2, s3)
    # the coordinate along the sliced dimension, and grad's stride there
    if DIM == 0:
        j = i0
        gs = g0
    elif DIM == 1:
        j = i1
        gs = g1
    elif DIM == 2:
        j = i2
        gs = g2
    else:
        j = i3
        gs = g3
    # position j of the result is grad's (j - start) / step where that is a whole number
    # below count (grad's size along the dimension), zero elsewhere
    rel = j - start
    inside = (rel >= 0) & (rel % step == 0) & (rel < count * step)
    g_off = i0 * g0 + i1 * g1 + i2 * g2 + i3 * g3 + (rel // step - j) * gs
    value = tl.load(grad_ptr + g_off, mask=mask & inside, other=0)
    tl.store(out_ptr + offs, value, mask=mask)


def _bounds(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """``start`` and ``end`` as ATen's slice normalizes them for a dimension of ``size``."""
    start = 0 if start is None else start
    end = size if end is None else end
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end


def slice_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int,
                   start: int | None, end: int | None, step: int) -> torch.Tensor:
    """The gradient of ``input[..., start:end:step, ...]`` (along ``dim``) from ``grad``,
    or NotImplemented for a call this kernel does not take (a complex or bool gradient, one
    whose shape is not the slice's, more than four dimensions after merging)."""
    sizes = [int(s) for s in input_sizes]
    if (not sizes or grad.is_complex() or grad.dtype == torch.bool or len(sizes) != grad.dim()
            or step < 1):
        return NotImplemented
    dim = dim % len(sizes)
    start, end = _bounds(sizes[dim], start, end)
    count = (end - start + step - 1) // step
    expected = sizes[:dim] + [count] + sizes[dim + 1:]
    if list(grad.shape) != expected:
        return NotImplemented
    out = torch.empty(sizes, dtype=grad.dtype, device=grad.device)
    n = out.numel()
    if n == 0:
        return out
    # grad's strides in the result's shape (the sliced dimension keeps grad's stride)
    layout = merged_layout(sizes, [list(grad.stride()), list(out.stride())], keep=dim)
    if layout is None:
        return NotImplemented
    (_, s1, s2, s3), (sg, _) = layout.sizes, layout.strides
    _slice_backward_kernel[(triton.cdiv(n, _BLOCK),)](
        grad, out, n, s1, s2, s3, *sg, start, step, count, DIM=layout.kept, BLOCK=_BLOCK)
    return out
