"""The interface between the routing table (Python) and the flagos dispatcher (C++).

The C++ extension implements :class:`Backend` and hands it to
:func:`flagos.routing.set_backend`. The dispatcher keeps, per (op, device index), a cached
chain of provider names; when :meth:`Backend.bump_version` has been called since the chain
was cached, it calls the resolver again (under the GIL, once per (op, device)).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Backend", "NullBackend", "Resolver"]

Resolver = Callable[[str, int], list[str]]
"""``resolver(op, device_index) -> chain``: provider names in order, ``"cpu"`` last."""


@runtime_checkable
class Backend(Protocol):
    """What the flagos C++ core gives the routing table."""

    def bump_version(self) -> None:
        """The table changed: cached chains are stale and must be resolved again."""

    def cpp_providers(self) -> list[str]:
        """Names of the providers registered on the C++ side, the built-in ``cpu`` included."""

    def provider_engines(self) -> dict[str, str]:
        """The engine each registered provider runs on, by name: ``"cpu fallback"``,
        ``"twin"``, ``"python"``, ``"foreign kernels"``, ``"external"`` (``"wrapper"`` for
        a provider that wraps the rest of its chain)."""

    def register_python_provider(self, name: str, fn: Callable[..., object]) -> None:
        """Make the Python provider ``fn(op, args, kwargs)`` callable by ``name`` from C++."""

    def device_hal_names(self) -> list[str]:
        """The HAL name of each flagos device, indexed by device index."""

    def stats(self) -> list[tuple[str, str, int, int, int]]:
        """Counters: ``(op, provider, calls, total_ns, declined)`` rows."""

    def reset_stats(self) -> None:
        """Zero the counters."""

    def set_resolver(self, resolver: Resolver) -> None:
        """Install the function that resolves a chain for ``(op, device_index)``."""


class NullBackend:
    """The backend before the C++ core is loaded: no devices, no counters."""

    def bump_version(self) -> None:
        """Nothing is cached, nothing to do."""

    def cpp_providers(self) -> list[str]:
        """Only the built-in CPU fallback."""
        return ["cpu"]

    def provider_engines(self) -> dict[str, str]:
        """Only the built-in CPU fallback."""
        return {"cpu": "cpu fallback"}

    def register_python_provider(self, name: str, fn: Callable[..., object]) -> None:
        """Nothing to register with."""

    def device_hal_names(self) -> list[str]:
        """No devices."""
        return []

    def stats(self) -> list[tuple[str, str, int, int, int]]:
        """No calls were counted."""
        return []

    def reset_stats(self) -> None:
        """No counters to zero."""

    def set_resolver(self, resolver: Resolver) -> None:
        """Nothing will call it."""
