"""Op providers: the plugin API and its discovery through the ``flagos.ops`` entry points.

A package ships a provider by declaring an entry point::

    [project.entry-points."flagos.ops"]
    myops = "my_package.flagos_provider:provider"      # a Provider, or a zero-arg callable

and writing a :class:`Provider`::

    class MyOps(Provider):
        name = "myops"
        hals = frozenset({"cuda"})                      # None: every HAL

        def serves(self, op: str) -> bool:
            return op in {"aten::mm", "aten::add.Tensor"}

        def __call__(self, op, args, kwargs):
            if args[0].dtype is torch.float64:
                return NotImplemented                   # decline: the next provider runs
            return my_mm(*args, **kwargs)

    provider = MyOps()
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from importlib import metadata

import torch

__all__ = ["ENTRY_POINT_GROUP", "WELL_KNOWN_PROVIDERS", "CpuProvider", "Provider", "discover"]

ENTRY_POINT_GROUP = "flagos.ops"

WELL_KNOWN_PROVIDERS: frozenset[str] = frozenset({"native", "gems", "boxing", "quant-triton",
                                                   "emulation", "cpu"})
"""Provider names a routing file may use whether or not they are installed here (a chain
entry that is not installed is skipped at resolution with the reason "not installed")."""


class Provider:
    """An op provider: serves some ops on some HALs.

    Subclass it and set the class attributes (or pass them to ``__init__``):

    - ``name``: the name routing files use (``"gems"``).
    - ``hals``: the HAL names it runs on, or ``None`` for every HAL.
    - ``is_cpp``: ``True`` for a provider whose kernels are C++: its C++ side registers
      itself with the flagos core under ``name`` and runs without the GIL; the Python
      object only describes it (``hals``, ``serves``) and its ``__call__`` is never used.

    Python providers implement ``__call__``, which returns the op's result, or
    ``NotImplemented`` to decline this call (the next provider in the chain then runs).
    """

    name: str = ""
    hals: frozenset[str] | None = None
    is_cpp: bool = False
    capture_safe: bool = False
    """Whether a Python provider's calls may be captured into a graph
    (``torch.flagos.graph``): every call queues all its device work on the current stream,
    never reads device memory on the host, and queues the same work for the same inputs
    (autotuning done beforehand). Leave it False otherwise: a capture then stops with an
    error naming the op and provider. C++ providers are capture-safe by their engine.
    Random ops are refused in a capture whatever this says, except on a CPU twin: a kernel
    given its seed at launch would draw the same numbers at every replay."""

    replayable_ops: frozenset[str] = frozenset()
    """Ops (``"aten::add.Tensor"``) whose calls a Python provider lets flagos relaunch from
    C++ (:mod:`flagos.launch_cache`): for each, its ``__call__`` on flagos tensors is a
    function of the arguments' metadata (dtypes, sizes, strides, alignment, other
    arguments' values) whose device work is its kernel launches through the HAL
    (:mod:`flagos.kernels`, Triton through :mod:`flagos.triton_driver`). A call's first
    run with a key goes through Python and its launches are recorded; later calls with
    that key launch them again without Python or the GIL."""

    def __init__(self, name: str | None = None, hals: Iterable[str] | None = None) -> None:
        if name is not None:
            self.name = name
        if hals is not None:
            self.hals = frozenset(hals)
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"{type(self).__name__} has no name")

    def serves(self, op: str) -> bool:
        """Whether this provider can serve ``op`` at all: the full name ``aten::add.Tensor``,
        or ``aten::addmm`` for a default overload. Called once per op and table version,
        never per call. The default serves every op."""
        return True

    def serves_on(self, op: str, hal: str) -> bool:
        """Whether this provider serves ``op`` on devices of HAL ``hal``. Providers whose
        coverage depends on the HAL (a twin device's kernels, a vendor library) override
        it; the default is :meth:`serves`."""
        return self.serves(op)

    def unavailable_on(self, hal: str | None) -> str | None:
        """Why this provider cannot run at all on devices of HAL ``hal`` (``None``: on any
        device), or ``None`` when it can. A provider whose kernels come from an optional
        library it loads on first use (FlagGems) says here that the library is missing,
        too old or failed to load; the chain then skips it with this reason, which
        :func:`flagos.routing.explain` and ``python -m flagos info`` print. Called at
        resolution, before :meth:`serves_on`; the default is always ``None``."""
        return None

    def unserved_reason(self, op: str, hal: str | None) -> str | None:
        """Why ``op`` is not served (on ``hal``; None: any HAL), for ``explain``: e.g. a
        kernel library that failed to load. The default gives no reason."""
        return None

    def status_lines(self) -> list[str]:
        """Lines about the provider's state for ``python -m flagos info`` (e.g. the
        libraries it loaded); the default has none."""
        return []

    def __call__(
        self, op: torch._ops.OpOverload, args: tuple, kwargs: dict
    ) -> object:
        """Run ``op`` on flagos tensors; return the result, or ``NotImplemented`` to decline."""
        raise NotImplementedError(f"provider {self.name!r} does not implement __call__")

    def __repr__(self) -> str:
        kind = "C++" if self.is_cpp else "Python"
        hals = "all HALs" if self.hals is None else ", ".join(sorted(self.hals))
        return f"<{kind} provider {self.name!r} on {hals}>"


class CpuProvider(Provider):
    """The CPU fallback built into the flagos core: serves every op on every HAL, never
    declines, and is always last in every chain."""

    name = "cpu"
    is_cpp = True


def _load(ep: metadata.EntryPoint) -> Provider:
    obj = ep.load()
    if not isinstance(obj, Provider) and callable(obj):
        obj = obj()
    if not isinstance(obj, Provider):
        raise TypeError(f"loaded {type(obj).__name__}, not a flagos.routing.Provider")
    if obj.hals is not None and not isinstance(obj.hals, frozenset):
        raise TypeError(f"'hals' is {type(obj.hals).__name__}, not a frozenset or None")
    return obj


def discover() -> dict[str, Provider]:
    """Load every provider of the ``flagos.ops`` entry-point group, plus the built-in
    ``cpu``. A provider that fails to load warns (naming the entry point and the error) and
    is skipped; of two providers with one name the first found stays."""
    found: dict[str, Provider] = {"cpu": CpuProvider()}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep.dist, "name", None) or "?"
        label = f"flagos.ops entry point {ep.name!r} ({ep.value}, from {dist})"
        try:
            provider = _load(ep)
        except Exception as e:  # noqa: BLE001 - a broken plugin must never break flagos
            warnings.warn(f"skipping {label}: {type(e).__name__}: {e}", RuntimeWarning,
                          stacklevel=2)
            continue
        if provider.name in found:
            warnings.warn(f"skipping {label}: provider name {provider.name!r} is already "
                          f"taken by {found[provider.name]!r}", RuntimeWarning, stacklevel=2)
            continue
        found[provider.name] = provider
    return found
