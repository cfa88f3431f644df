"""Fixtures for the routing tests: a fake C++ backend and a clean routing table."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from flagos import routing
from flagos.routing import Provider, table


class FakeBackend:
    """What the C++ core does, in Python: a per-(op, device) chain cache invalidated by
    bump_version(), providers called in order until one accepts, and call counters."""

    def __init__(self, hals: list[str], cpp: tuple[str, ...] = ("cpu",)) -> None:
        self.hals = list(hals)
        self.cpp = set(cpp)
        self.version = 0
        self.resolver: Callable[[str, int], list[str]] | None = None
        self.python: dict[str, Callable] = {}
        self.cache: dict[tuple[str, int], tuple[int, list[str]]] = {}
        self.counters: dict[tuple[str, str], list[int]] = {}
        self.resolves = 0

    def bump_version(self) -> None:
        self.version += 1

    def cpp_providers(self) -> list[str]:
        return sorted(self.cpp)

    def provider_engines(self) -> dict[str, str]:
        engines = {name: "python" for name in self.python}
        engines.update({name: "cpu fallback" if name == "cpu" else "twin" for name in self.cpp})
        return engines

    def register_python_provider(self, name: str, fn: Callable) -> None:
        self.python[name] = fn

    def device_hal_names(self) -> list[str]:
        return list(self.hals)

    def stats(self) -> list[tuple[str, str, int, int, int]]:
        return [(op, p, c[0], c[1], c[2]) for (op, p), c in self.counters.items()]

    def reset_stats(self) -> None:
        self.counters.clear()

    def set_resolver(self, resolver: Callable[[str, int], list[str]]) -> None:
        self.resolver = resolver

    def chain(self, op: str, device: int) -> list[str]:
        version = self.version  # read before resolving: a change meanwhile re-resolves
        cached = self.cache.get((op, device))
        if cached is None or cached[0] != version:
            assert self.resolver is not None
            self.resolves += 1
            cached = (version, self.resolver(op, device))
            self.cache[(op, device)] = cached
        return cached[1]

    def dispatch(self, op, args: tuple, kwargs: dict, device: int = 0) -> tuple[str, object]:
        """Run ``op`` through its chain; return (the provider that served it, the result)."""
        name = op.name()
        for provider in self.chain(name, device):
            start = time.perf_counter_ns()
            fn = self.python.get(provider)
            result = fn(op, args, kwargs) if fn else op(*args, **kwargs)  # C++: run the op
            row = self.counters.setdefault((name, provider), [0, 0, 0])
            row[1] += time.perf_counter_ns() - start
            if result is NotImplemented:
                row[2] += 1
                continue
            row[0] += 1
            return provider, result
        raise AssertionError(f"no provider accepted {name}")


class FakeProvider(Provider):
    """A Python provider serving a fixed set of ops; declines float64 inputs."""

    def __init__(self, name: str, ops: set[str] | None = None, hals=None) -> None:
        super().__init__(name, hals)
        self.ops = ops
        self.calls: list[str] = []

    def serves(self, op: str) -> bool:
        return self.ops is None or op in self.ops

    def __call__(self, op, args, kwargs):
        self.calls.append(op.name())
        if any(getattr(a, "dtype", None) is not None and str(a.dtype) == "torch.float64"
               for a in args):
            return NotImplemented
        return op(*args, **kwargs)


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBackend]:
    """A clean table (no env routes) connected to a fake backend with devices sim, cuda."""
    for var in ("FLAGOS_ROUTES", "FLAGOS_ROUTES_FILE", "FLAGOS_LOG_DISPATCH"):
        monkeypatch.delenv(var, raising=False)
    fake = FakeBackend(["sim", "cuda"])
    previous = table._state.backend
    routing.set_backend(fake)
    routing.reset()
    yield fake
    table._state.added.clear()
    table._state.overrides.clear()
    monkeypatch.undo()
    routing.set_backend(previous)  # the real dispatcher again, when flagos is connected
    routing.reset()


@pytest.fixture
def make_backend() -> type[FakeBackend]:
    """The fake backend class, to build more than one."""
    return FakeBackend


@pytest.fixture
def installed(backend: FakeBackend) -> dict[str, FakeProvider]:
    """Python providers for the well-known names: boxing (all HALs), gems (cuda only),
    native (cuda, serves only mm)."""
    made = {
        "boxing": FakeProvider("boxing"),
        "gems": FakeProvider("gems", hals={"cuda"}),
        "native": FakeProvider("native", ops={"aten::mm"}, hals={"cuda"}),
    }
    for p in made.values():
        routing.register_provider(p)
    return made
