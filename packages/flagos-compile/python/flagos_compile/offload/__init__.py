"""Whole-graph offload: ``torch.compile`` for chips that run compiled graphs (edge NPUs).

    backend = flagos_compile.offload.OffloadBackend()      # strict=, min_block_size=, cache_dir=
    policy = torch.compile(model, backend=backend)          # or backend="flagos_offload"
    with torch.no_grad():
        actions = policy(image.to("flagos"), state.to("flagos"))
    print(backend.explain())                                # what ran on the chip, and why not the rest

Needs a HAL with the graph runtime (flagos_hal.h, ABI 1.1), its graph compiler (entry
point group ``flagos.graph_compiler``) and torch's ONNX exporter (``onnx``, ``onnxscript``:
``pip install 'flagos-compile[offload]'``). See docs/offload.md.
"""

from __future__ import annotations

from flagos_compile.offload.backend import (
    GraphReport,
    OffloadBackend,
    OffloadError,
    RegionReport,
    offload_backend,
    unavailable_reason,
)

__all__ = ["GraphReport", "OffloadBackend", "OffloadError", "RegionReport", "explain", "offload_backend",
           "unavailable_reason"]


def explain(backend: OffloadBackend | None = None) -> str:
    """What the graphs compiled by `backend` (default: the ``"flagos_offload"`` one) offloaded,
    and why the rest was not."""
    return (backend or offload_backend).explain()
