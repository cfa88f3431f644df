"""Triton kernels of flagos-ops-gems' own, for calls FlagGems computes wrong.

FlagGems' guarded kernels (``_kernel_guards.py``) decline the calls they would get wrong
(some, all of them).
With a twin device the chain's next provider runs them on the twin's own kernels; without
one (``FLAGOS_NO_TWIN=1``, a chip without CUDA) the next provider would be the CPU
fallback, a round trip through host memory. For those calls the gems provider runs a
kernel of its own instead, one op per module here, each tested against ATen
(``tests/test_own_kernels.py``) and written to be given back to FlagGems:

- ``aten::mul.Tensor`` (:mod:`.mul`): operands of any strides and broadcast shapes
  (FlagGems' Hopper ``mul`` reads both flat, as if dense and of the result's shape);
- ``aten::slice_backward`` (:mod:`.slice_backward`): a gradient of any strides (FlagGems'
  reads it as contiguous; a rotary embedding's half is a view);
- ``aten::nll_loss_backward`` (:mod:`.nll_loss_backward`): rows with an ignored target
  (FlagGems' kernel stores a zero at the ignored index's column, outside the row; it is
  never run), so a language model's loss gradient, the size of its logits, stays on the
  device.

Each kernel returns ``NotImplemented`` for a call it does not take (the chain's next
provider runs it): other dtypes, more than four dimensions after merging.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["OPS", "kernel_for"]

# op -> (module, function)
OPS: dict[str, tuple[str, str]] = {
    "aten::mul.Tensor": ("mul", "mul"),
    "aten::nll_loss_backward": ("nll_loss_backward", "nll_loss_backward"),
    "aten::slice_backward": ("slice_backward", "slice_backward"),
}


def kernel_for(op: str) -> Callable[..., object] | None:
    """This package's kernel for ``op``, or None where it has none (Triton is imported
    here, when one is asked for)."""
    entry = OPS.get(op)
    if entry is None:
        return None
    module, function = entry
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)
