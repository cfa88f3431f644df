"""``explain()``: why an op goes where it goes; ``stats()``: where the calls went."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import ops, shadow, table
from .table import Decision, _state

__all__ = ["DeviceRoute", "Explanation", "OpExplanation", "UnknownOpError", "explain",
           "reset_stats", "stats"]


class UnknownOpError(ValueError):
    """An op name that is not registered; ``suggestions`` holds the closest names."""

    def __init__(self, op: str, suggestions: list[str]) -> None:
        self.op, self.suggestions = op, suggestions
        hint = f"; did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(f"unknown op {op!r}{hint}")


@dataclass(frozen=True)
class DeviceRoute:
    """The route of one op on one device (``index`` None: no devices, global entries)."""

    index: int | None
    decision: Decision
    engine: str | None = None
    """The engine :attr:`provider` runs on (``"twin"``, ``"cpu fallback"``, ``"python"``,
    ``"foreign kernels"``, ``"external"``); None where the core has not registered it."""
    capture_safe: bool | None = None
    """Whether the op may run through :attr:`provider` while a graph is captured
    (``torch.flagos.graph``); None where the core has not registered the provider."""
    capture_note: str | None = None
    """Why a capture refuses the op although :attr:`provider` is capture-safe."""
    decomposed: bool = False
    """Whether the op runs as its composite kernel, its parts each down its own route:
    an op that reaches the routes as itself for a provider of that form, where no provider
    before the CPU fallback is left on this device."""

    @property
    def provider(self) -> str:
        """The provider that serves the op first (later ones run only if it declines)."""
        return self.decision.chain[0]

    def __str__(self) -> str:
        d = self.decision
        head = (f"flagos:{self.index} (HAL {d.hal})" if self.index is not None
                else "no flagos devices; global entries only")
        if d.rule:
            configured = (f"configured: {', '.join(d.rule.chain)}\n"
                          f"      from {d.rule.describe()} at {d.rule.origin}")
        else:
            configured = "configured: nothing (no entry and no default)"
        lines = [f"  {head}", f"    {configured}"]
        for s in d.steps:
            lines.append(f"    - {s.provider}: " + (
                s.reason or "kept" if s.kept else f"skipped, {s.reason}"))
        lines.append(f"    chain: {' -> '.join(d.chain)}")
        engine = f" ({self.engine} engine)" if self.engine else ""
        if self.decomposed:
            lines.append("    served by: its composite kernel (no provider before the cpu "
                         "fallback); each part goes down its own route")
            lines.append("    graph capture: as its parts")
        else:
            lines.append(f"    served by: {self.provider}{engine}")
        if self.capture_safe is not None and not self.decomposed:
            lines.append("    graph capture: " + ("yes" if self.capture_safe else
                                                   f"no ({self.capture_note or 'a capture that reaches it fails'})"))
        return "\n".join(lines)


@dataclass(frozen=True)
class Explanation:
    """The report of :func:`explain`; ``str()`` is the readable form."""

    op: str
    version: int
    devices: tuple[DeviceRoute, ...]

    def __str__(self) -> str:
        return "\n".join([f"{self.op} (routing table version {self.version})",
                          *(str(d) for d in self.devices)])


@dataclass(frozen=True)
class OpExplanation:
    """:func:`explain` of a whole op without a default overload (``aten::softmax``, a
    routing key as much as an overload is): one :class:`Explanation` per overload."""

    op: str
    overloads: tuple[Explanation, ...]

    def __str__(self) -> str:
        return "\n".join([f"{self.op}: {len(self.overloads)} overloads",
                          *(str(e) for e in self.overloads)])


def explain(op: str) -> Explanation | OpExplanation:
    """Which provider serves ``op`` on each flagos device, and why: the entry that matched
    and where it was written, each chain entry skipped with the reason, the final chain.

    ``op`` is an op name (``aten::mm``, ``aten::add.Tensor``) or, as in a routing key, a
    whole op: ``aten::softmax`` (no default overload) gives an :class:`OpExplanation`, one
    explanation per overload. Raises :class:`UnknownOpError` with the closest names.
    """
    if not ops.is_op(op):
        names = ops.overloads(op)
        if names:
            return OpExplanation(op, tuple(explain(n) for n in names))
        raise UnknownOpError(op, ops.suggest(op, whole_ops=False))
    version = table.version()
    engines = _state.backend.provider_engines()
    capture_safe = getattr(_state.backend, "capture_safe", lambda name: None)
    random = torch.Tag.nondeterministic_seeded in ops.overload(op).tags
    routed_as_itself = getattr(_state.backend, "routed_as_itself", lambda op: False)

    def route(index: int | None, hal: str | None) -> DeviceRoute:
        decision = table.decide(op, hal)
        first = decision.chain[0]
        safe, note = capture_safe(first), None
        if safe and random and index is not None and \
                not _state.backend.captures_random_ops(first, index):
            safe, note = False, "a random op: its kernel would draw the same numbers at every replay"
        decomposed = engines.get(first) == "cpu fallback" and routed_as_itself(op)
        return DeviceRoute(index, decision, engines.get(first), safe, note, decomposed)

    hals = table.device_hals()
    if not hals:
        return Explanation(op, version, (route(None, None),))
    return Explanation(op, version, tuple(route(i, hal) for i, hal in enumerate(hals)))


def stats() -> dict[str, dict[str, dict]]:
    """Calls per op and provider since the last :func:`reset_stats`:
    ``{op: {provider: {"calls": int, "total_us": float, "declined": int}}}``. Under
    shadow verification (flagos.routing.shadow) the rows of checked (op, provider) pairs
    also have ``"shadowed"`` (calls checked), ``"mismatches"`` and ``"last_error"``."""
    out: dict[str, dict[str, dict]] = {}
    for op, provider, calls, total_ns, declined in _state.backend.stats():
        if provider == shadow.SHADOW_PROVIDER:
            continue  # the wrapper's own row: its declines are the calls it did not sample
        row = out.setdefault(op, {}).setdefault(
            provider, {"calls": 0, "total_us": 0.0, "declined": 0})
        row["calls"] += int(calls)
        row["total_us"] += total_ns / 1000.0
        row["declined"] += int(declined)
    for (op, provider), checked in shadow.counts().items():
        out.setdefault(op, {}).setdefault(
            provider, {"calls": 0, "total_us": 0.0, "declined": 0}).update(checked)
    return out


def reset_stats() -> None:
    """Zero the call counters (and the shadow counters)."""
    _state.backend.reset_stats()
    shadow.reset_counts()
