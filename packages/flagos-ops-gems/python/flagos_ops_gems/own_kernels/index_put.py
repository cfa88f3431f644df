"""``aten::index_put``, ``index_put_`` and ``_index_put_impl_`` (``x[idx] = v``) with
negative indices.

FlagGems 5.0's kernels mask negative indices out instead of wrapping them, so those writes
are skipped; their guard declines every call. These wrap the indices (and check each as
ATen does, before anything is written) and hand the call to FlagGems' own kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ._indices import wrapped_indices

__all__ = ["index_put"]


def index_put(library_index_put: Callable[..., torch.Tensor], self: torch.Tensor,
              indices: Sequence[torch.Tensor | None], values: torch.Tensor,
              *args: object, **kwargs: object) -> torch.Tensor:
    """FlagGems' ``library_index_put`` (any of the three forms: ``accumulate`` and, for
    ``_index_put_impl_``, ``unsafe`` pass through) on the wrapped indices; NotImplemented
    for indices it does not take."""
    wrapped = wrapped_indices(self, indices)
    if wrapped is None or values.device != self.device:
        return NotImplemented
    return library_index_put(self, wrapped, values, *args, **kwargs)
