"""``aten::cumsum`` and ``aten::cumsum.out`` of integer and bool tensors, and with a
``dtype`` other than the input's.

ATen scans integers and bools in int64 (or the ``dtype`` asked for), after casting the
input to that dtype; FlagGems 5.0 scans narrower integers in int32 whatever the result's
dtype, so an int32 count's running total can overflow where ATen's does not, and its
guard declines any ``dtype`` other than the input's own. This kernel casts the input to
the dtype ATen scans in (``_to_copy``, served on the device) and hands it to FlagGems'
own ``cumsum``, which scans int64 and floating tensors in their own dtype (half
precision in float32, as ATen does). A mixture-of-experts layer's token offsets
(``cumsum(counts, 0, dtype=torch.int32)``) are such a call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._results import into_out

__all__ = ["cumsum", "cumsum_out"]


def _scan_dtype(inp: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype | None:
    """The dtype ATen scans ``inp`` in, or None for a call this kernel does not take."""
    if dtype is None:
        dtype = inp.dtype if inp.dtype.is_floating_point else torch.int64
    if dtype.is_complex or dtype == torch.bool or inp.is_complex():
        return None
    return dtype


def cumsum(library_cumsum: Callable[..., torch.Tensor], inp: torch.Tensor, dim: int,
           *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.cumsum(inp, dim, dtype=dtype)`` as ATen computes it, FlagGems'
    ``library_cumsum`` scanning; NotImplemented for complex and bool results."""
    target = _scan_dtype(inp, dtype)
    if target is None or not -max(inp.dim(), 1) <= dim < max(inp.dim(), 1):
        return NotImplemented  # ATen's error (a dim out of range), from the next provider
    if inp.dim() == 0:
        return inp.to(target, copy=True)
    return library_cumsum(inp.to(target), dim, dtype=target)


def cumsum_out(library_cumsum: Callable[..., torch.Tensor], inp: torch.Tensor, dim: int,
               *, dtype: torch.dtype | None = None, out: torch.Tensor) -> torch.Tensor:
    """``torch.cumsum(inp, dim, dtype=dtype, out=out)``: the scan above, copied into ``out``
    (resized as ATen resizes it); NotImplemented where ``out``'s dtype is not the scan's
    (ATen's error, from the next provider)."""
    target = _scan_dtype(inp, dtype)
    if target is None or out.dtype != target:
        return NotImplemented
    return into_out(cumsum(library_cumsum, inp, dim, dtype=dtype), out)
