"""The active routing table: its layers, run-time changes and resolution.

Layers, applied low to high (a later layer wins):

1. the shipped defaults (``defaults/default.toml``),
2. ``FLAGOS_ROUTES_FILE``,
3. run-time :func:`load` and :func:`set` calls, in call order,
4. ``FLAGOS_ROUTES``,
5. active :func:`override` contexts, innermost (latest entered) last.

Merging rule: an entry of a later layer replaces every earlier entry it covers. An entry
covers the same key on its HAL; a global entry (no ``[hal.X]``) covers that key on every
HAL; a whole-op entry (``aten::add``) also covers the entries of its overloads
(``aten::add.Tensor``); a global ``default`` covers the HAL defaults. Within one layer
nothing is replaced.

Lookup rule: for op ``O`` (overload ``O.v`` of whole op ``O``) on HAL ``H``, the first
present of: ``[hal.H] O.v``, ``O.v``, ``[hal.H] O``, ``O``, ``[hal.H] default``,
``default``. So the most specific key wins, and at the same key a HAL entry beats a global
one.

The table is a process-global: changes (including :func:`override` contexts, from any
thread) are seen by every thread from the next op call. Mutations hold a lock and publish
an immutable snapshot; :func:`resolve` reads one snapshot without locking.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from . import ops, shadow
from .backend import Backend, NullBackend
from .config import Layer, RoutingConfigError, Rule, Vocabulary, load_file, parse_spec
from .providers import WELL_KNOWN_PROVIDERS, Provider, discover

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "DEFAULTS_FILE", "Decision", "RouteOverride", "Step", "decide", "load", "override",
    "providers", "register_provider", "reset", "resolve", "set_backend", "set_routes", "version",
]

DEFAULTS_FILE = Path(__file__).parent / "defaults" / "default.toml"
WELL_KNOWN_HALS: frozenset[str] = frozenset({"sim", "cuda"})

log = logging.getLogger("flagos.routing")
Spec = str | Mapping[str, str | Sequence[str]]


@dataclass(frozen=True)
class Step:
    """One chain entry at resolution: kept, or skipped with the reason."""

    provider: str
    kept: bool
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    """How ``op`` resolved on ``hal``: the entry that matched (``None``: no entry, so only
    ``cpu``), what each chain entry became, and the final chain."""

    op: str
    hal: str | None
    rule: Rule | None
    steps: tuple[Step, ...]
    chain: tuple[str, ...]


@dataclass(frozen=True)
class _Snapshot:
    version: int
    rules: Mapping[tuple[str | None, str], Rule]
    providers: Mapping[str, Provider]


@dataclass
class _State:
    lock: threading.RLock = field(default_factory=threading.RLock)
    ready: bool = False
    base: list[Layer] = field(default_factory=list)  # shipped defaults + FLAGOS_ROUTES_FILE
    runtime: list[Layer] = field(default_factory=list)  # load() and set()
    env: list[Layer] = field(default_factory=list)  # FLAGOS_ROUTES
    overrides: list[tuple[object, Layer]] = field(default_factory=list)
    found: dict[str, Provider] = field(default_factory=dict)  # entry points + built-in cpu
    added: dict[str, Provider] = field(default_factory=dict)  # register_provider()
    backend: Backend = field(default_factory=NullBackend)
    version: int = 0
    snapshot: _Snapshot = field(default_factory=lambda: _Snapshot(0, {}, {}))
    log_dispatch: bool = False
    logged: set = field(default_factory=set)


_state = _State()


def _providers_now() -> dict[str, Provider]:
    return {**_state.found, **_state.added}


def _installed_hals() -> frozenset[str]:
    hals = {ep.name for ep in metadata.entry_points(group="flagos.hal")}
    return WELL_KNOWN_HALS | hals | frozenset(_state.backend.device_hal_names())


def vocabulary() -> Vocabulary:
    """The provider and HAL names a configuration may use now: the well-known ones plus the
    installed ones (``flagos.ops`` / ``flagos.hal`` entry points, C++ providers, devices)."""
    with _state.lock:
        names = WELL_KNOWN_PROVIDERS | frozenset(_providers_now())
        names |= frozenset(_state.backend.cpp_providers()) - {shadow.SHADOW_PROVIDER}
        return Vocabulary(names, _installed_hals())


def _covers(new: Rule, old: Rule) -> bool:
    if new.hal is not None and new.hal != old.hal:
        return False
    if new.key == old.key:
        return True
    return ops.key_kind(new.key) == "op" and ops.split(old.key)[0] == new.key != old.key


def _merge(layers: Sequence[Layer]) -> dict[tuple[str | None, str], Rule]:
    merged: dict[tuple[str | None, str], Rule] = {}
    for layer in layers:
        for new in layer:
            for k in [k for k, old in merged.items() if _covers(new, old)]:
                del merged[k]
        for rule in layer:
            merged[(rule.hal, rule.key)] = rule
    return merged


def _publish() -> None:
    """Rebuild the snapshot from the layers; caller holds the lock."""
    layers = [*_state.base, *_state.runtime, *_state.env, *(lay for _, lay in _state.overrides)]
    _state.version += 1
    _state.snapshot = _Snapshot(_state.version, _merge(layers), _providers_now())
    _state.backend.bump_version()


def _republish_if_ready() -> None:
    with _state.lock:
        if _state.ready:
            _publish()


def _shadow_hooks() -> shadow.TableHooks:
    return shadow.TableHooks(
        backend=lambda: _state.backend, version=lambda: _state.version,
        chain=lambda op, device: decide(op, device_hals()[device]).chain,
        vocabulary=lambda: vocabulary(), republish=_republish_if_ready)


def _read_env() -> tuple[list[Layer], list[Layer]]:
    vocab = vocabulary()
    base = load_file(DEFAULTS_FILE, vocab)
    if path := os.environ.get("FLAGOS_ROUTES_FILE"):
        base += load_file(path, vocab)
    env = [parse_spec(spec, "FLAGOS_ROUTES", vocab)] if (
        spec := os.environ.get("FLAGOS_ROUTES", "")).strip() else []
    return base, env


def _setup_logging() -> None:
    _state.log_dispatch = os.environ.get("FLAGOS_LOG_DISPATCH", "") not in ("", "0")
    if _state.log_dispatch and not any(getattr(h, "_flagos", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[flagos.routing] %(message)s"))
        handler._flagos = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _ensure_ready() -> None:
    if _state.ready:
        return
    with _state.lock:
        if not _state.ready:
            _state.found = discover()
            _register_python_providers()
            _state.base, _state.env = _read_env()
            shadow.load_env()
            _setup_logging()
            _state.ready = True
            _publish()


def _register_python_providers() -> None:
    for name, p in _providers_now().items():
        if not p.is_cpp:
            _state.backend.register_python_provider(name, p)
    shadow.register(_state.backend)


def _caller() -> str:
    frame = sys._getframe(2)
    return f"called at {Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


# --- public mutations -----------------------------------------------------------------------


def set_routes(spec: Spec) -> None:
    """``flagos.routing.set``: route ops from now on, over the files loaded so far (but under ``FLAGOS_ROUTES`` and
    active overrides). ``spec`` is a one-line spec or a mapping::

        flagos.routing.set("aten::mm=cpu;aten::softmax=boxing,cpu")
        flagos.routing.set({"aten::mm": "boxing", "default": ["gems", "cpu"]})

    Takes effect on the next op call. Raises :class:`RoutingConfigError` and changes nothing
    when the spec is invalid.
    """
    _ensure_ready()
    note = _caller()
    with _state.lock:
        _state.runtime.append(parse_spec(spec, "set()", vocabulary(), note))
        _publish()


def load(path: str | os.PathLike[str]) -> None:
    """Load a routing file (and its includes) over the routes so far, like :func:`set`."""
    _ensure_ready()
    with _state.lock:
        _state.runtime += load_file(Path(path), vocabulary())
        _publish()


def reset() -> None:
    """Back to the shipped defaults plus the environment: drops every :func:`load` and
    :func:`set`, re-reads ``FLAGOS_ROUTES_FILE``, ``FLAGOS_ROUTES`` and
    ``FLAGOS_LOG_DISPATCH``, and discovers the ``flagos.ops`` providers again. Active
    :func:`override` contexts stay until they exit; :func:`register_provider` providers
    stay."""
    with _state.lock:
        _state.found = discover()
        _state.base, _state.env = _read_env()  # may raise: then the routes stay as they were
        shadow.load_env()
        _register_python_providers()
        _state.runtime.clear()
        _state.logged.clear()
        _setup_logging()
        _state.ready = True
        _publish()


class RouteOverride:
    """A context manager that routes ops while it is active; see :func:`override`."""

    def __init__(self, spec: Spec, note: str = "") -> None:
        _ensure_ready()
        self._layer = parse_spec(spec, "override()", vocabulary(), note)
        self._tokens: list[object] = []

    def __enter__(self) -> Self:
        token = object()
        with _state.lock:
            _state.overrides.append((token, self._layer))
            self._tokens.append(token)
            _publish()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with _state.lock:
            token = self._tokens.pop()
            _state.overrides[:] = [(t, lay) for t, lay in _state.overrides if t is not token]
            _publish()


def override(spec: Spec) -> RouteOverride:
    """Route ops as ``spec`` says inside a ``with`` block, then restore (also when the block
    raises)::

        with flagos.routing.override({"aten::mm": "cpu"}):
            torch.mm(a, b)          # served by cpu

    Overrides nest (the innermost wins) and sit above every other layer. The table is
    process-global: an override is seen by all threads while it is active, and overrides
    entered by several threads are each removed by their own exit. Raises
    :class:`RoutingConfigError` at once when the spec is invalid.
    """
    return RouteOverride(spec, _caller())


def register_provider(provider: Provider) -> None:
    """Install a provider without an entry point (e.g. from a notebook or a test). It
    replaces an installed provider of the same name (an explicit registration is the
    user's intent). Takes effect on the next op call."""
    if not isinstance(provider, Provider):
        raise TypeError(f"expected a flagos.routing.Provider, got {type(provider).__name__}")
    _ensure_ready()
    with _state.lock:
        _state.added[provider.name] = provider
        if not provider.is_cpp:
            _state.backend.register_python_provider(provider.name, provider)
        _publish()


def set_backend(backend: Backend | None) -> None:
    """Connect the flagos C++ core (``None``: disconnect). Registers every installed Python
    provider with it, gives it :func:`resolve` and bumps the version."""
    backend = NullBackend() if backend is None else backend
    if not isinstance(backend, Backend):
        missing = [m for m in ("bump_version", "cpp_providers", "provider_engines",
                               "register_python_provider",
                               "device_hal_names", "stats", "reset_stats", "set_resolver")
                   if not callable(getattr(backend, m, None))]
        raise TypeError(f"not a routing backend; missing: {', '.join(missing)}")
    with _state.lock:
        _state.backend = backend
        # The resolver first: a configuration mistake (FLAGOS_ROUTES_FILE, FLAGOS_ROUTES)
        # must not leave the dispatcher connected to no table, running ops on a chain
        # nobody configured. With the resolver in place the mistake is raised by every op
        # (every resolve reads the table again) until it is fixed.
        backend.set_resolver(resolve)
        if _state.ready:
            _register_python_providers()
        else:
            try:
                _ensure_ready()
            except RoutingConfigError as e:
                # Not here: connecting happens inside `import flagos` (and `import torch`),
                # and the contract is an error at first use, not a failed import.
                warnings.warn(f"flagos: the routing configuration is invalid, so every routed "
                              f"op on a flagos device raises until it is fixed (then call "
                              f"flagos.routing.reset()): {e}", RuntimeWarning, stacklevel=2)
                return
        _publish()


# --- resolution -----------------------------------------------------------------------------


def version() -> int:
    """The table version: it grows by one at every change."""
    _ensure_ready()
    return _state.version


def rules() -> list[Rule]:
    """The merged routing entries in force (shipped defaults, files, the environment,
    load()/set(), active overrides), each with its chain and where it came from, sorted
    by HAL scope then key."""
    _ensure_ready()
    return sorted(_state.snapshot.rules.values(), key=lambda r: (r.hal or "", r.key))


def providers() -> dict[str, Provider]:
    """The installed providers by name (entry points, :func:`register_provider`, ``cpu``)."""
    _ensure_ready()
    return dict(_state.snapshot.providers)


def _lookup(rules: Mapping[tuple[str | None, str], Rule], op: str, hal: str | None
            ) -> Rule | None:
    overload, whole = ops.overload_key(op), ops.split(op)[0]
    for key in (overload, whole, "default"):
        for scope in (hal, None):
            if (rule := rules.get((scope, key))) is not None:
                return rule
    return None


def _skip_reason(name: str, p: Provider | None, op: str, hal: str | None, cpp: frozenset[str]
                 ) -> str:
    if name == "cpu":
        return ""
    if p is None:
        return "" if name in cpp else "not installed"
    if p.is_cpp and name not in cpp:
        return "C++ provider not registered with the flagos core"
    if p.hals is not None and hal is not None and hal not in p.hals:
        return f"not available on HAL {hal!r} (runs on: {', '.join(sorted(p.hals))})"
    try:
        if why := p.unavailable_on(hal):
            return why
    except Exception as e:  # noqa: BLE001 - a broken provider is skipped, not fatal
        return f"unavailable_on() raised {type(e).__name__}: {e}"
    try:
        serves = p.serves(op) if hal is None else p.serves_on(op, hal)
    except Exception as e:  # noqa: BLE001 - a broken provider is skipped, not fatal
        return f"serves() raised {type(e).__name__}: {e}"
    if serves:
        return ""
    why = p.unserved_reason(op, hal)
    return f"does not serve {op}" + (f": {why}" if why else "")


def decide(op: str, hal: str | None) -> Decision:
    """Resolve ``op`` for a device of HAL ``hal`` (``None``: global entries only) with the
    reasons; :func:`resolve` and :func:`flagos.routing.explain` use it."""
    _ensure_ready()
    snap = _state.snapshot
    cpp = frozenset(_state.backend.cpp_providers())
    rule = _lookup(snap.rules, op, hal)
    steps: list[Step] = []
    for name in rule.chain if rule else ():
        reason = (_skip_reason(name, snap.providers.get(name), op, hal, cpp)
                  or shadow.quarantine_reason(op, name))
        steps.append(Step(name, not reason, reason))
    chain = tuple(s.provider for s in steps if s.kept)
    if "cpu" not in chain:
        steps.append(Step("cpu", True, "appended: the CPU fallback is always last"))
        chain += ("cpu",)
    return Decision(op, hal, rule, tuple(steps), chain)


def device_hals() -> list[str]:
    """The HAL name of each flagos device (from the backend)."""
    return list(_state.backend.device_hal_names())


def resolve(op: str, device_index: int) -> list[str]:
    """The provider chain for ``op`` (``aten::add.Tensor``, or ``aten::addmm`` for a
    default overload) on flagos device ``device_index``: ``cpu`` is always last. This is the
    resolver the C++ dispatcher calls once per (op, device) and table version."""
    hals = device_hals()
    if not 0 <= device_index < len(hals):
        raise IndexError(f"no flagos device {device_index} ({len(hals)} devices)")
    d = decide(op, hals[device_index])
    if log.isEnabledFor(logging.INFO if _state.log_dispatch else logging.DEBUG):
        _log_decision(d, device_index)
    return shadow.wrap(op, list(d.chain))


def _log_decision(d: Decision, device_index: int) -> None:
    key = (d.op, device_index, d.hal, d.chain)
    if key in _state.logged:
        return
    _state.logged.add(key)
    skipped = "; ".join(f"{s.provider}: {s.reason}" for s in d.steps if not s.kept)
    source = f"{d.rule.describe()} at {d.rule.origin}" if d.rule else "no entry"
    log.log(logging.INFO if _state.log_dispatch else logging.DEBUG,
            "%s on flagos:%d (%s) -> %s (from %s%s)", d.op, device_index, d.hal,
            " -> ".join(d.chain), source, f"; skipped {skipped}" if skipped else "")


shadow.attach(_shadow_hooks())
