"""What the provider needs from a Python kernel library: its op table, loaded on first use.

A kernel library is a set of Python functions, one per ATen overload, each written as a
kernel that torch would call when registered with ``torch.library`` on the library's
device (FlagGems' Triton kernels on ``cuda``). The provider runs them on zero-copy twin
aliases of flagos tensors, so the library never learns about flagos.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

__all__ = ["KernelLibrary", "LibraryUnavailable", "OpTable"]

OpTable = Mapping[str, Callable[..., object]]
"""ATen overload (``"aten::add.Tensor"``; ``"aten::abs"`` for a default overload) -> kernel."""


class LibraryUnavailable(Exception):
    """The library cannot be used here: missing, too old, or failing to import. The message
    is the reason shown by ``flagos.routing.explain`` and ``python -m flagos info``."""


class KernelLibrary:
    """A Python kernel library served by a :class:`~flagos_ops_gems.KernelLibraryProvider`.

    Subclasses set ``name`` and implement :meth:`load`.
    """

    name: str = ""
    keyword_aliases: Mapping[str, str] = MappingProxyType({})
    """Schema keyword -> the library's own name for it, for kernels that name a kwarg-only
    schema argument otherwise (applied only to kernels lacking the schema's name)."""

    def replayable_ops(self) -> frozenset[str]:
        """Of the ops loaded for flagos devices (no twin), those whose calls flagos may
        relaunch from C++ (:func:`flagos.provider_api.set_replayable`): each kernel's device
        work is its launches through the HAL, a function of its arguments' metadata. Asked
        after :meth:`load`; the default is none."""
        return frozenset()

    def load(self) -> tuple[OpTable, frozenset[str]]:
        """Import the library (called once, on first use) and return its op table and the
        twin device types its kernels run on (``{"cuda"}``, ``{"cpu"}``; ``{"flagos"}``: loaded
        for flagos devices without a twin, its kernels take flagos tensors). Raises
        :class:`LibraryUnavailable` with the reason when it cannot be used."""
        raise NotImplementedError
