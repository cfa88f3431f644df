"""A flagos op provider serving a Python kernel library's ops (FlagGems: ``gems``).

The calls run in flagos-core's foreign-kernel engine (C++): each flagos tensor argument
is aliased without a copy as a tensor of the HAL's native twin device, the twin device
and the twin stream under the current flagos stream are made current, the kernel runs
with its allocations served by the flagos allocator, and its results are mapped back as
for the ``boxing`` provider. This side says which ops are served where, loads the library
on first use and hands the engine one kernel per op (asked once per op, never per call).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import torch
from flagos.routing import Provider

from ._keywords import adapt_keywords
from ._library import KernelLibrary, LibraryUnavailable, OpTable

__all__ = ["KernelLibraryProvider"]


@functools.cache
def _twin_of_hal(hal: str) -> str | None:
    from flagos.provider_api import twin_of_hal

    return twin_of_hal(hal)


@functools.cache
def _reaches_flagos(op: str) -> bool:
    """Whether calls of ``op`` on flagos tensors reach the flagos dispatcher: an op whose
    CompositeImplicitAutograd kernel is all torch has for flagos decomposes above it (its
    parts are routed instead)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        return not (has(op, "CompositeImplicitAutograd") and not has(op, "PrivateUse1"))
    except RuntimeError:  # not an operator this torch knows
        return False


class KernelLibraryProvider(Provider):
    """Serves the ops of a :class:`~flagos_ops_gems.KernelLibrary` on HALs whose twin device
    its kernels run on. The library is imported on the first route resolution that names
    this provider; when it cannot be, the provider is skipped with the reason."""

    is_cpp = True  # its calls run in the core's C++ foreign-kernel engine

    def __init__(self, name: str, library: KernelLibrary) -> None:
        super().__init__(name)
        self.library = library
        self._lock = threading.Lock()
        self._loaded: tuple[OpTable, frozenset[str]] | None = None
        self._failure: str | None = None

    # --- the library, loaded once ---------------------------------------------------------

    def _load(self) -> tuple[OpTable, frozenset[str]] | None:
        if self._loaded is not None or self._failure is not None:
            return self._loaded
        with self._lock:
            if self._loaded is None and self._failure is None:
                try:
                    table, twins = self.library.load()
                except LibraryUnavailable as e:
                    self._failure = str(e)
                    return None
                from flagos import launch_cache
                from flagos.provider_api import route_ops_as_themselves, set_replayable

                # The library serves functional forms; they must reach the dispatcher as
                # such rather than as their out= forms.
                route_ops_as_themselves(op for op in table if _reaches_flagos(op))
                aliases = self.library.keyword_aliases
                kernels = {op: adapt_keywords(op, k, aliases) for op, k in table.items()}
                if "flagos" in twins:  # on flagos tensors: launches through the HAL
                    # every kernel watched, so that ops declared replayable later (the
                    # admission check, replay_admission.py) are recorded as strictly
                    kernels = {op: launch_cache.watched(k) for op, k in kernels.items()}
                    set_replayable(self.name, self.library.replayable_ops() & kernels.keys())
                self._loaded = (kernels, frozenset(twins))
        return self._loaded

    def ops(self) -> list[str]:
        """The ATen overloads the library implements (empty when it is unavailable)."""
        loaded = self._load()
        return sorted(loaded[0]) if loaded else []

    def resolve_kernel(self, op: str) -> Callable[..., object] | None:
        """The kernel for ``op`` (``"aten::add.Tensor"``), or None: what the core's engine
        asks once per op."""
        loaded = self._load()
        return loaded[0].get(op) if loaded else None

    # --- Provider -------------------------------------------------------------------------

    def unavailable_on(self, hal: str | None) -> str | None:
        """The reason this provider cannot run on ``hal`` (None: any device): the library
        is unavailable, or the HAL's twin device is not one its kernels run on."""
        loaded = self._load()
        if loaded is None:
            return self._failure
        twins = loaded[1]
        if hal is None:
            return None
        twin = _twin_of_hal(hal)
        if twin is None and "flagos" in twins:
            return None  # loaded for flagos devices: its kernels take flagos tensors
        if twin not in twins:
            return (f"not available on HAL {hal!r}: {self.library.name} kernels run on "
                    f"{', '.join(sorted(twins))} tensors, the HAL's twin device is "
                    f"{twin or 'none (opaque memory)'}")
        return None

    def serves(self, op: str) -> bool:
        """True for the overloads the library implements that reach the flagos dispatcher."""
        loaded = self._load()
        return loaded is not None and op in loaded[0] and _reaches_flagos(op)
