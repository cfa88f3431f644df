"""Binding manifests: find each library, check its ABI version, resolve every symbol with
dlsym and hand the ops to the C++ engine. Nothing here raises for a broken library: its
ops stay unserved by ``native`` with the reason, which the provider reports to
``flagos.routing.explain`` and ``python -m flagos info``."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from flagos.routing import RoutingConfigError

from .conventions import CONVENTIONS, DTYPES
from .manifest import Manifest, parse

__all__ = ["ENTRY_POINT_GROUP", "LibraryStatus", "bind_manifest", "find_manifests",
           "library_path"]

ENTRY_POINT_GROUP = "flagos.native"
SHIPPED = Path(__file__).parent / "manifests"


@dataclass
class LibraryStatus:
    """What became of one manifest: ``served`` maps each bound op overload to its dtype
    names; ``unserved`` maps op overloads to the reason; ``error`` is set when nothing of
    the manifest could be bound (bad file, library not found, version out of range)."""

    manifest: str
    name: str = "?"
    path: str = ""
    version: str = ""
    hals: frozenset[str] = frozenset()
    served: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unserved: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def summary(self) -> str:
        if self.error:
            return f"{self.name} ({self.manifest}): not loaded: {self.error}"
        missing = f", {len(self.unserved)} unserved" if self.unserved else ""
        return (f"{self.name} {self.version} on {', '.join(sorted(self.hals))}: "
                f"{len(self.served)} op overloads{missing} ({self.path})")


def find_manifests() -> list[str]:
    """The manifests to bind: ``FLAGOS_NATIVE_MANIFESTS`` (``os.pathsep``-separated paths)
    if set, else every ``flagos.native`` entry point (a path, or a zero-arg callable
    returning one; this package's own ships the sim library's)."""
    env = os.environ.get("FLAGOS_NATIVE_MANIFESTS")
    if env is not None:
        return [p for p in env.split(os.pathsep) if p]
    found = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        obj = ep.load()
        found.append(str(obj() if callable(obj) else obj))
    return found


def library_path(manifest: Manifest) -> str:
    """Where the manifest's library is: its ``path``, its ``soname`` (left to the dynamic
    loader's search) or what its ``locate`` function returns."""
    lib = manifest.library
    if lib.path:
        return lib.path
    if lib.soname:
        return lib.soname
    module, _, func = lib.locate.partition(":")
    return str(getattr(importlib.import_module(module), func)())


def bind_manifest(path: str) -> LibraryStatus:
    """Parse, open, check and bind one manifest; never raises."""
    from . import _engine  # the compiled engine (not needed to read manifests)

    status = LibraryStatus(manifest=path)
    try:
        manifest = parse(path)
    except RoutingConfigError as e:
        status.error = f"manifest error: {e}"
        return status
    lib = manifest.library
    status.name, status.hals = lib.name, lib.hals
    every = [o for e in manifest.ops for o in e.overloads]
    try:
        status.path = library_path(manifest)
        handle = _engine.open_library(status.path, lib.version_symbol, lib.min_version,
                                      lib.max_version, lib.error_symbol, lib.version_style)
    except Exception as e:  # noqa: BLE001 - a missing or wrong library leaves its ops unserved
        status.error = f"library {lib.name!r}: {e}"
        status.unserved = {o: status.error for o in every}
        return status
    v = _engine.library_version(handle)
    status.version = f"{v >> 16}.{v & 0xFFFF}"
    for entry in manifest.ops:
        symbols = {DTYPES[d][0]: pair for d, pair in entry.symbols.items()}
        conv = CONVENTIONS[entry.convention]
        missing = _engine.bind(handle, entry.convention, symbols, list(entry.overloads),
                               list(conv.helpers), conv.phases == 1)
        if missing:
            reason = (f"{lib.name} lacks symbol(s) {', '.join(missing)} "
                      f"({Path(manifest.file).name}:{entry.line})")
            status.unserved.update({o: reason for o in entry.overloads})
        else:
            dtypes = tuple(entry.symbols)
            status.served.update({o: dtypes for o in entry.overloads})
    return status
