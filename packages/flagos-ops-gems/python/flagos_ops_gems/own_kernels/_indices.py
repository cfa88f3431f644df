"""Index tensors as ATen reads them, for FlagGems' ``index`` and ``index_put``: negative
indices wrapped (FlagGems masks them out: ``index`` then reads memory it never wrote,
``index_put`` skips the write) and every index checked against its dimension's size, the
error being ATen's. Boolean masks are left to FlagGems, which takes their ``nonzero``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

__all__ = ["wrapped_indices"]

_BLOCK = 1024
_MASKS = (torch.bool, torch.uint8)
_INTEGERS = (torch.int64, torch.int32)


@triton.jit
def _wrap_kernel(idx_ptr, out_ptr, bad_ptr, n, size, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i = tl.load(idx_ptr + offs, mask=mask, other=0).to(tl.int64)
    wrapped = tl.where(i < 0, i + size, i)
    tl.store(out_ptr + offs, wrapped, mask=mask)
    bad = mask & ((wrapped < 0) | (wrapped >= size))
    # one out-of-range index (any of them) and its value, for the caller's error
    tl.store(bad_ptr + offs * 0, tl.full((BLOCK,), 1, tl.int64), mask=bad)
    tl.store(bad_ptr + 1 + offs * 0, i, mask=bad)


def wrapped_indices(self: torch.Tensor, indices: Sequence[torch.Tensor | None]
                    ) -> list[torch.Tensor | None] | None:
    """``indices`` with each integer index tensor's negative entries wrapped by the size of
    the dimension it indexes; IndexError as ATen's for an index out of range. None for
    indices this does not take (another dtype, on another device, more dimensions than
    ``self`` has), which the caller declines."""
    out: list[torch.Tensor | None] = []
    checks: list[tuple[int, int, torch.Tensor]] = []
    dim = 0
    for t in indices:
        if t is None:
            out.append(None)
            dim += 1
            continue
        if t.device != self.device:
            return None
        if t.dtype in _MASKS:
            out.append(t)
            dim += t.dim()
            continue
        if t.dtype not in _INTEGERS or dim >= self.dim():
            return None
        size = self.shape[dim]
        idx = t.contiguous()
        wrapped = torch.empty(idx.shape, dtype=torch.int64, device=self.device)
        bad = torch.zeros(2, dtype=torch.int64, device=self.device)
        if idx.numel():
            _wrap_kernel[(triton.cdiv(idx.numel(), _BLOCK),)](idx, wrapped, bad, idx.numel(),
                                                              size, BLOCK=_BLOCK)
        checks.append((dim, size, bad))
        out.append(wrapped)
        dim += 1
    if dim > self.dim():
        return None
    if checks:
        found = torch.stack([bad for _, _, bad in checks]).tolist()  # one wait for them all
        for (d, size, _), (flag, value) in zip(checks, found):
            if flag:
                raise IndexError(f"index {value} is out of bounds for dimension {d} with size "
                                 f"{size}")
    return out
