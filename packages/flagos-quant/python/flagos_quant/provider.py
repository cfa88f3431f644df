"""The op provider ``emulation``: scaled matmuls on flagos computed by dequantize-then-
matmul (:mod:`.scaled_mm`), for chips without FP8/FP4 matrix units, and the weight-only
packed linear ops (:mod:`.fused_linear`) by their reference formula where no kernel of
the twin device serves them (opaque memory).

The shipped routes send ``aten::_scaled_mm`` and ``aten::_scaled_mm_v2`` to it first on
every HAL; a chip with such units routes them to its own kernels instead, e.g.
``FLAGOS_ROUTES="hal.cuda.aten::_scaled_mm=boxing"`` runs the H200's FP8 units through
the CUDA twin. Every op the emulation runs (casts, multiplies, the matmul) is itself a
flagos op, routed as usual.
"""

from __future__ import annotations

import torch
from flagos.routing import Provider

from .fused_linear import (
    FP8_WEIGHT_LINEAR,
    NVFP4_WEIGHT_LINEAR,
    fp8_weight_linear_reference,
    nvfp4_weight_linear_reference,
)
from .scaled_mm import emulated_scaled_mm, emulated_scaled_mm_v2

__all__ = ["EmulationProvider", "provider"]

_SCALED_MM = {"aten::_scaled_mm": emulated_scaled_mm,
              "aten::_scaled_mm_v2": emulated_scaled_mm_v2}
_FUNCTIONS = {**_SCALED_MM, FP8_WEIGHT_LINEAR: fp8_weight_linear_reference,
              NVFP4_WEIGHT_LINEAR: nvfp4_weight_linear_reference}
SERVED = frozenset(_FUNCTIONS) | {f"{op}.out" for op in _SCALED_MM}


class EmulationProvider(Provider):
    """Serves ``aten::_scaled_mm`` and ``aten::_scaled_mm_v2`` (functional and ``out=``)
    and the packed linear ops on every HAL."""

    name = "emulation"
    # Every call runs routed flagos ops only (each checked itself while a graph is
    # captured) and reads nothing on the host.
    capture_safe = True

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
    """Entry point of group ``flagos.ops``. Also declares that the packed linear ops'
    kernels allocate through ``torch.empty`` only, so that through ``boxing`` on a CUDA twin
    their results are made in flagos memory rather than copied into it."""
    from flagos.provider_api import results_in_flagos_memory

    results_in_flagos_memory([FP8_WEIGHT_LINEAR, NVFP4_WEIGHT_LINEAR])
    return EmulationProvider()
