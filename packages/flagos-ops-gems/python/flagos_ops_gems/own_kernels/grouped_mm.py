"""``aten::_grouped_mm`` of a 2-d input and a 3-d stack of weights of any strides.

FlagGems 5.0's grouped matrix product addresses group ``g`` of the weights at row
``g * K`` as if the stack were contiguous, and its guard declines any other layout; a
mixture-of-experts layer passes its expert weights transposed (``w.transpose(1, 2)``), a
view. This kernel hands FlagGems' own kernel a contiguous copy of the weights (made on
the device), the case it computes as ATen does. Bias, another output dtype and the other
input ranks are left to the next provider.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["grouped_mm"]


def grouped_mm(library_grouped_mm: Callable[..., torch.Tensor], a: torch.Tensor,
               b: torch.Tensor, offs: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None
               ) -> torch.Tensor:
    """``torch._grouped_mm(a, b, offs)`` for a 2-d ``a`` and a 3-d ``b``; NotImplemented for
    the calls it does not take (no offsets, a bias, another output dtype, other ranks)."""
    if (a.dim() != 2 or b.dim() != 3 or offs is None or bias is not None
            or out_dtype not in (None, a.dtype) or a.dtype != b.dtype):
        return NotImplemented
    return library_grouped_mm(a, b.contiguous(), offs)
