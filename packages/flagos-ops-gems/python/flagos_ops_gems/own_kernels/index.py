"""``aten::index.Tensor`` (``x[idx]``) with negative indices.

FlagGems 5.0's ``index`` masks negative indices out instead of wrapping them, so the
result's elements for them are memory it never wrote; its guard declines every call (the
indices' values are on the device). This kernel wraps them (and checks each index as ATen
does) and hands the call to FlagGems' ``index``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ._indices import wrapped_indices

__all__ = ["index"]


def index(library_index: Callable[..., torch.Tensor], self: torch.Tensor,
          indices: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """``self[indices]`` as ATen computes it, FlagGems' ``library_index`` gathering; or
    NotImplemented for indices it does not take."""
    wrapped = wrapped_indices(self, indices)
    return NotImplemented if wrapped is None else library_index(self, wrapped)
