"""Graph compilers: a HAL's offline toolchain, found through the entry point group
``flagos.graph_compiler``.

A chip whose runtime executes whole compiled graphs (the HAL's graph_* functions, ABI 1.1)
ships its compiler separately, as real edge-NPU toolchains are: the entry point's name is
the HAL's name (``get_name``), its value a zero-argument callable returning an object with
the :class:`GraphCompiler` interface. It takes ONNX (exported by ``torch.onnx.export``),
says which ONNX ops it supports, and returns an artifact in one of the HAL's formats.
"""

from __future__ import annotations

from importlib import metadata
from typing import Protocol, runtime_checkable

GROUP = "flagos.graph_compiler"


class CompileError(RuntimeError):
    """The compiler could not turn the model into an artifact; the message says why."""


@runtime_checkable
class GraphCompiler(Protocol):
    """What a HAL's graph compiler offers."""

    name: str      # e.g. "flagos-sim-compiler"
    version: str   # part of every cache key: a new compiler version recompiles
    formats: tuple[str, ...]  # artifact formats it writes (graph_get_formats of its HAL)

    def op_support(self, op_type: str, domain: str = "") -> str | None:
        """None when ONNX op `op_type` (of `domain`, "" for the standard one) is supported,
        else the reason it is not."""

    def settings(self) -> str:
        """Text of the settings that change what `compile` produces (part of cache keys)."""

    def compile(self, onnx_model: bytes, fmt: str) -> bytes:
        """Compile a serialized ONNX ModelProto (static shapes) to an artifact of `fmt`;
        raises CompileError."""


def find(hal_name: str) -> GraphCompiler | None:
    """The graph compiler registered for HAL `hal_name`, or None when there is none."""
    for ep in metadata.entry_points(group=GROUP):
        if ep.name == hal_name:
            return ep.load()()
    return None


def registered() -> list[str]:
    """Names of the HALs that have a graph compiler installed."""
    return sorted(ep.name for ep in metadata.entry_points(group=GROUP))
