"""flagos-ops-gems: FlagGems Triton kernels as the flagos op provider ``gems``.

``gems`` serves exactly the ATen overloads that the installed FlagGems implements (read
from FlagGems at run time: what ``flag_gems.enable()`` would register), on HALs whose twin
device is the one FlagGems' kernels run on (``cuda`` on NVIDIA). The calls run zero-copy
on flagos memory, on the current flagos stream, in flagos-core's foreign-kernel engine
(see :class:`KernelLibraryProvider`).

FlagGems loads lazily: ``import torch`` / ``import flagos`` do not import it; the first
route resolution that names ``gems`` does. A FlagGems that is missing, too old or fails to
import makes ``gems`` skipped with the reason (``flagos.routing.explain``,
``python -m flagos info``).

The shipped routes do not name ``gems``; select its routing file (every op FlagGems serves
-> gems, then boxing, then cpu) with ``FLAGOS_ROUTES_FILE=gems`` or
``flagos.routing.load("gems")`` (the file is :data:`ROUTES_FILE`).
"""

from __future__ import annotations

from pathlib import Path

ROUTES_FILE = str(Path(__file__).parent / "routes" / "gems.toml")
"""The routing file that sends every op FlagGems serves to ``gems`` (boxing, cpu behind)."""


def register_library(name: str, library: KernelLibrary) -> KernelLibraryProvider:
    """Make ``library`` the op provider ``name``: registers its C++ side (the core's
    foreign-kernel engine) and returns the :class:`KernelLibraryProvider` describing it
    (install it with ``flagos.routing.register_provider`` when not returned from an entry
    point). Nothing of the library is imported here."""
    from flagos.provider_api import register_foreign_provider

    from ._provider import KernelLibraryProvider

    p = KernelLibraryProvider(name, library)
    register_foreign_provider(name, p.resolve_kernel)
    return p


def gems_unavailable(device: int = 0) -> str | None:
    """Why the ``gems`` provider cannot run on flagos:``device`` here (not installed, its
    library missing or not for this device), or None when it can."""
    import flagos

    gems = flagos.routing.providers().get("gems")
    if gems is None:
        return "not installed"
    return gems.unavailable_on(flagos.get_device_properties(device).hal)


def provider() -> KernelLibraryProvider:
    """Entry point of group ``flagos.ops``: the ``gems`` provider (FlagGems)."""
    from ._flag_gems import FlagGems

    return register_library("gems", FlagGems())


# Everything above is what flagos' entry points read (provider, ROUTES_FILE). torch comes
# before this package's modules: importing it loads flagos, whose provider discovery calls
# provider() above, which imports them itself; run as `python -m flagos_ops_gems.warm`,
# this package is imported before torch is.
import torch  # noqa: F401

from ._flag_gems import SUPPORTED, FlagGems
from ._library import KernelLibrary, LibraryUnavailable, OpTable
from ._provider import KernelLibraryProvider

__all__ = [
    "ROUTES_FILE", "SUPPORTED", "FlagGems", "KernelLibrary", "KernelLibraryProvider",
    "LibraryUnavailable", "OpTable", "gems_unavailable", "provider", "register_library",
]
