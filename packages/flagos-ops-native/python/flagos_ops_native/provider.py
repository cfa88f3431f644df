"""The ``native`` provider: what it serves (from the bound manifests) and the entry point
that binds them and registers the C++ engine with the flagos core."""

from __future__ import annotations

from pathlib import Path

from flagos.routing import Provider

from .loader import SHIPPED, LibraryStatus, bind_manifest, find_manifests

__all__ = ["NativeProvider", "manifest_dir", "provider", "simk_manifest", "statuses"]


def simk_manifest() -> str:
    """Entry point of group ``flagos.native``: the manifest of the sim reference library."""
    return str(SHIPPED / "simk.toml")


class NativeProvider(Provider):
    """The ``native`` provider: serves the ops its bound manifests serve, on their HALs."""

    name = "native"
    is_cpp = True

    def __init__(self, statuses: list[LibraryStatus]) -> None:
        super().__init__()
        self.statuses = statuses

    def _on(self, hal: str) -> list[LibraryStatus]:
        return [s for s in self.statuses if not s.error and hal in s.hals]

    def serves(self, op: str) -> bool:
        """True when some bound library serves ``op`` (on any HAL)."""
        return any(op in s.served for s in self.statuses)

    def serves_on(self, op: str, hal: str) -> bool:
        """True when a library bound for HAL ``hal`` serves ``op``."""
        return any(op in s.served for s in self._on(hal))

    def unserved_reason(self, op: str, hal: str | None) -> str | None:
        """Why ``op`` is not served on ``hal``: the library failed to load, lacks the
        symbol, or runs on other HALs; None when no manifest names the op."""
        for s in self.statuses:
            if op in s.unserved:
                return s.unserved[op]
        for s in self.statuses:
            if op in s.served and hal is not None and hal not in s.hals:
                return f"{s.name} runs on HAL(s) {', '.join(sorted(s.hals))}, not {hal!r}"
        errors = [s.summary() for s in self.statuses if s.error]
        return "; ".join(errors) or None

    def status_lines(self) -> list[str]:
        """One line per manifest, for ``python -m flagos info``."""
        return [s.summary() for s in self.statuses] or ["no manifests found"]


_bound: dict[tuple[str, ...], list[LibraryStatus]] = {}


def statuses() -> list[LibraryStatus]:
    """Bind every manifest found (see :func:`flagos_ops_native.loader.find_manifests`);
    a list of manifests already bound in this process is not bound again (the routing
    table re-discovers providers at each ``flagos.routing.reset()``)."""
    paths = tuple(find_manifests())
    if paths not in _bound:
        _bound[paths] = [bind_manifest(p) for p in paths]
    return _bound[paths]


def provider() -> NativeProvider:
    """Entry point of group ``flagos.ops``: binds the manifests and registers the engine."""
    from flagos.provider_api import register_external_provider

    from . import _engine

    found = statuses()
    register_external_provider("native", _engine.engine_capsule())
    return NativeProvider(found)


def manifest_dir() -> Path:
    """The folder of the shipped manifests."""
    return SHIPPED
