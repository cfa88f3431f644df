"""Connects flagos.routing (the table, in Python) to the C++ dispatcher."""

from __future__ import annotations

from collections.abc import Callable

from flagos import _C, launch_cache, routing
from flagos.provider_api import route_ops_as_themselves


class CppBackend:
    """The routing Backend protocol implemented on flagos._C.

    The resolver asks for the C++ providers and the devices' HALs once per (op, device)
    it resolves; both are answered from a cache: the HALs never change in a process, and
    the provider list only changes by a registration, which bumps the C++ routing version.
    """

    def __init__(self) -> None:
        self._hals = [_C._device_properties(i)["hal"] for i in range(_C._device_count())]
        self._providers: tuple[int, list[str]] = (-1, [])

    def bump_version(self) -> None:
        _C._bump_routing_version()

    def cpp_providers(self) -> list[str]:
        version = _C._routing_version()
        if self._providers[0] != version:
            self._providers = (version, sorted(_C._providers()))
        return self._providers[1]

    def provider_engines(self) -> dict[str, str]:
        return dict(_C._provider_engines())

    def register_python_provider(self, name: str, fn: Callable[..., object]) -> None:
        replayable = sorted(getattr(fn, "replayable_ops", ()))
        entry = _python_entry(fn)
        # A recorded call is watched for device work its launches would not repeat.
        _C._register_provider(name, "python", launch_cache.watched(entry) if replayable else entry)
        # A Python provider is captured only where it says it may be (Provider.capture_safe).
        _C._set_provider_capture_safe(name, bool(getattr(fn, "capture_safe", False)))
        _C._set_provider_replayable(name, replayable)

    def capture_safe(self, name: str) -> bool | None:
        """Whether provider ``name`` may run while a graph is being captured; None for a
        name the core does not know."""
        return bool(_C._provider_capture_safe(name)) if name in _C._providers() else None

    def captures_random_ops(self, name: str, device: int) -> bool:
        """Whether random ops through provider ``name`` may be captured on flagos:``device``
        (each replay drawing anew)."""
        return bool(_C._provider_captures_random_ops(name, device))

    def routed_as_itself(self, op: str) -> bool:
        """Whether ``op`` reaches its route as itself only because a provider serves that
        form (route_ops_as_themselves): a call no provider before the CPU fallback
        accepts then runs as its composite kernel, its parts routed one by one."""
        return bool(_C._routed_as_itself(op))

    def device_hal_names(self) -> list[str]:
        return self._hals

    def stats(self) -> list[tuple[str, str, int, int, int]]:
        return list(_C._routing_stats())

    def reset_stats(self) -> None:
        _C._reset_routing_stats()

    def set_resolver(self, resolver: Callable[[str, int], list[str]]) -> None:
        _C._set_resolver(resolver)

    def register_wrapper_provider(self, name: str, fn: Callable[..., object]) -> None:
        """Register ``fn(op, args, kwargs)`` as a provider that wraps the rest of its chain
        (shadow verification): hot ops reach it as the route after it would have them."""
        _C._register_provider(name, "wrapper", _python_entry(fn))

    def run_provider(self, provider: str, op: str, args: tuple, kwargs: dict, device: int
                     ) -> object:
        """Run ``op`` with ``provider`` alone (no chain, no CPU fallback): its results, or
        ``NotImplemented`` when it declined. Shadow verification and the tuner use it."""
        return _C._run_provider(provider, op, tuple(args), dict(kwargs), device)


def _python_entry(fn: Callable[..., object]) -> Callable[[str, tuple, dict], object]:
    """Adapts a Provider (called with an OpOverload) to the C++ call (with the op name).
    ``ScalarType`` arguments reach Python as their enum values (ints); the provider gets
    them as ``torch.dtype``, as the op's Python callers pass them."""
    cache: dict[str, tuple[object, tuple[int, ...], tuple[str, ...]]] = {}

    def call(op_name: str, args: tuple, kwargs: dict) -> object:
        entry = cache.get(op_name)
        if entry is None:
            op = routing.ops.overload(op_name)
            entry = cache[op_name] = (op, *_dtype_arguments(op))
        op, positions, names = entry
        if positions or names:
            args, kwargs = _with_dtypes(args, kwargs, positions, names)
        return fn(op, args, kwargs)

    return call


def _dtype_arguments(op) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Positions (positional) and names (kwarg-only) of the op's ScalarType arguments."""
    positions, names = [], []
    for i, arg in enumerate(op._schema.arguments):
        if str(arg.real_type) in ("ScalarType", "Optional[ScalarType]"):
            (names.append(arg.name) if arg.kwarg_only else positions.append(i))
    return tuple(positions), tuple(names)


_DTYPES: dict[int, object] = {}


def _dtype(value: object) -> object:
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    d = _DTYPES.get(value)
    if d is None:
        import torch

        d = _DTYPES[value] = torch.ops.aten.empty.memory_format([0], dtype=value,
                                                                 device="meta").dtype
    return d


def _with_dtypes(args: tuple, kwargs: dict, positions: tuple[int, ...],
                 names: tuple[str, ...]) -> tuple[tuple, dict]:
    if positions:
        args = tuple(_dtype(a) if i in positions else a for i, a in enumerate(args))
    if names and any(n in kwargs for n in names):
        kwargs = {k: _dtype(v) if k in names else v for k, v in kwargs.items()}
    return args, kwargs


# Ops whose CompositeExplicitAutograd kernel calls a DispatchStub of the tensors' device in
# some supported torch release, where flagos has no kernel for it ("DispatchStub: missing
# kernel for flagos"): ldexp in torch 2.12. Routed as themselves, they go down their own
# route (the twin's or the CPU's ldexp) in every release.
STUB_COMPOSITE_OPS = ("aten::ldexp.Tensor", "aten::ldexp.out", "aten::ldexp_")


def install() -> None:
    """Give the routing table its backend (registers Python providers, the resolver) and
    route :data:`STUB_COMPOSITE_OPS` as themselves."""
    routing.set_backend(CppBackend())
    route_ops_as_themselves(STUB_COMPOSITE_OPS)
