"""The op provider ``emulation``: scaled matmuls on flagos computed by dequantize-then-
matmul (:mod:`.scaled_mm`), for chips without FP8/FP4 matrix units.

The shipped routes send ``aten::_scaled_mm`` and ``aten::_scaled_mm_v2`` to it first on
every HAL; a chip with such units routes them to its own kernels instead, e.g.
``FLAGOS_ROUTES="hal.cuda.aten::_scaled_mm=boxing"`` runs the H200's FP8 units through
the CUDA twin. Every op the emulation runs (casts, multiplies, the matmul) is itself a
flagos op, routed as usual.
"""

from __future__ import annotations

import torch
from flagos.routing import Provider

from .scaled_mm import emulated_scaled_mm, emulated_scaled_mm_v2

__all__ = ["EmulationProvider", "provider"]

_FUNCTIONS = {"aten::_scaled_mm": emulated_scaled_mm,
              "aten::_scaled_mm_v2": emulated_scaled_mm_v2}
SERVED = frozenset(_FUNCTIONS) | {f"{op}.out" for op in _FUNCTIONS}


class EmulationProvider(Provider):
    """Serves ``aten::_scaled_mm`` and ``aten::_scaled_mm_v2`` (functional and ``out=``)
    on every HAL."""

    name = "emulation"

    def serves(self, op: str) -> bool:
        return op in SERVED

    def __call__(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
        base = op._schema.name  # "aten::_scaled_mm"
        fn = _FUNCTIONS.get(base)
        if fn is None:
            return NotImplemented
        kwargs = dict(kwargs)
        out = kwargs.pop("out", None)
        result = fn(*args, **kwargs)
        if op._overloadname == "out":
            if out is None:
                return NotImplemented
            out.resize_(result.shape)
            out.copy_(result)
            return out
        return result


def provider() -> EmulationProvider:
    """Entry point of group ``flagos.ops``."""
    return EmulationProvider()
