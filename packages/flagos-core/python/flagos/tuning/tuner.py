"""The route tuner: every op of a workload on every provider that serves it, timed on the
device and checked against the CPU; the fastest correct provider heads the op's chain.

For each distinct call of the workload and each installed provider, the op is routed to
that provider alone (an override of the whole op: ``aten::mm = [provider]``, so every
overload the call may arrive as goes there) and the call is made as the model makes it.
The routing counters must show that the provider served it (a provider that declined, so
that ``cpu`` ran, is "declined"); its results must match torch's CPU kernels on the same
inputs within the dtype's tolerance (flagos.routing.compare); then it is timed
(flagos.tuning.timing). Per op, a provider's time is the sum over the workload's calls of
count x median. Only providers that served every call of the op correctly are eligible.

Noise: the provider the current routes send the op to (the baseline) keeps the op unless
another eligible provider is faster by more than both their spreads and by ``margin``
(a fraction of the baseline's time); so a re-run on a quiet machine changes nothing that
measured the same.

Shape-dependent choices: routes choose per op (and HAL), not per shape, because the
dispatcher resolves a chain once per op and device and the hot path then costs one version
check; a provider that is only fast on some sizes declines the others (returns
``NotImplemented``), and the chain the tuner writes, every eligible provider fastest
first, sends those calls to the next. Where the per-call winners differ, the routing file
says so in a comment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from flagos import routing
from flagos.routing.compare import mismatch

from .timing import Timing, time_call
from .workload import OpCall, Workload

__all__ = ["CallResult", "OpChoice", "ProviderRun", "TuneResult", "candidate_providers", "tune"]


@dataclass
class ProviderRun:
    """One provider on one call: ``status`` is ``ok``, ``mismatch``, ``declined``,
    ``not served`` or ``error`` (with ``detail``); ``timing`` when ``ok``."""

    provider: str
    status: str
    detail: str = ""
    timing: Timing | None = None


@dataclass
class CallResult:
    """Every provider's run of one workload call."""

    call: OpCall
    runs: dict[str, ProviderRun] = field(default_factory=dict)


@dataclass
class OpChoice:
    """The tuner's decision for one whole op: ``chain`` (fastest eligible first, ``cpu``
    last), each eligible provider's ``totals`` (workload-weighted median and spread, us),
    the ``baseline`` provider of the routes before tuning, and notes for the comments."""

    op: str
    calls: list[CallResult]
    chain: list[str]
    totals: dict[str, tuple[float, float]]
    baseline: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> str:
        """The provider that heads the chain."""
        return self.chain[0]

    def fastest(self) -> str | None:
        """The eligible provider with the least total time."""
        return min(self.totals, key=lambda p: self.totals[p][0]) if self.totals else None


@dataclass
class TuneResult:
    """What :func:`tune` measured and chose, on one device."""

    device: int
    hal: str
    device_name: str
    workload: str
    choices: list[OpChoice]
    settings: dict[str, object]

    def routes_text(self) -> str:
        """The routing file (flagos.tuning.routes_file)."""
        from .routes_file import format_routes

        return format_routes(self)


def _flagos_device(device: int) -> torch.device:
    return torch.device("flagos", device)


def candidate_providers(exclude: Iterable[str] = ()) -> list[str]:
    """The installed providers (:func:`flagos.routing.providers`: ``flagos.ops`` entry
    points, :func:`flagos.routing.register_provider`, ``cpu``). A name only the C++ core
    knows, with no provider describing what it serves, is not measured."""
    return sorted(set(routing.providers()) - {routing.shadow.SHADOW_PROVIDER} - set(exclude))


def _unavailable(name: str, hal: str) -> str:
    """Why provider ``name`` cannot run on HAL ``hal`` at all ("" when it can)."""
    p = routing.providers().get(name)
    if p is None or name == "cpu":
        return ""
    if p.hals is not None and hal not in p.hals:
        return f"not available on HAL {hal!r}"
    try:
        return p.unavailable_on(hal) or ""
    except Exception as e:  # noqa: BLE001 - a broken provider is reported, not fatal
        return f"unavailable_on() raised {type(e).__name__}: {e}"


def _routed_counts(whole: str) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for op, rows in routing.stats().items():
        if routing.ops.split(op)[0] != whole:
            continue
        for p, r in rows.items():
            calls, declined = out.get(p, (0, 0))
            out[p] = (calls + r["calls"], declined + r["declined"])
    return out


def _written(op: torch._ops.OpOverload, args: Sequence, kwargs: dict) -> list[torch.Tensor]:
    out = []
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        v = kwargs.get(a.name) if a.kwarg_only else (args[i] if i < len(args) else None)
        out += [t for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor)]
    return out


def _sync(device: int) -> None:
    torch.flagos.synchronize(device)


def _run_one(call: OpCall, provider: str, device: int, hal: str, reference: tuple,
             timing: dict, tolerance: float, seed: int) -> ProviderRun:
    op = call.overload()
    spec = {call.whole_op: [provider]}
    with routing.override(spec):
        decision = routing.table.decide(call.op, hal)
        if decision.chain[0] != provider:
            why = next((s.reason for s in decision.steps if s.provider == provider), "")
            return ProviderRun(provider, "not served", why)
        args, kwargs = call.inputs(_flagos_device(device), seed)
        before = _routed_counts(call.whole_op)
        try:
            out = op(*args, **kwargs)
            _sync(device)
        except Exception as e:  # noqa: BLE001 - a failing provider is reported, not fatal
            return ProviderRun(provider, "error", f"{type(e).__name__}: {e}".splitlines()[0])
        after = _routed_counts(call.whole_op)
        delta = {p: (after[p][0] - before.get(p, (0, 0))[0], after[p][1] - before.get(p, (0, 0))[1])
                 for p in after}
        mine = delta.get(provider, (0, 0))
        others = sum(c for p, (c, _) in delta.items() if p != provider)
        if not any(c or d for c, d in delta.values()):
            return ProviderRun(provider, "not served", "the call does not reach the routing "
                               "table as this op (its composite kernel runs other ops)")
        if mine[1] or others or not mine[0]:
            return ProviderRun(provider, "declined",
                               f"served by {', '.join(p for p, (c, _) in delta.items() if c)}")
        ref_out, ref_written = reference
        why = mismatch(out, ref_out, tolerance)
        if why is None:
            why = mismatch(_written(op, args, kwargs), ref_written, tolerance, "written arguments")
        if why is not None:
            return ProviderRun(provider, "mismatch", why)
        targs, tkwargs = call.inputs(_flagos_device(device), seed + 1)
        mutated = _written(op, targs, tkwargs)
        restore: Callable[[], object] | None = None
        limit = int(timing.get("max_calls", 200))
        if mutated:
            pristine = [t.clone() for t in mutated]

            def restore() -> None:
                for t, p in zip(mutated, pristine):
                    t.copy_(p)

            limit = min(limit, 16)  # an in-place op drifts its inputs: short batches
        t = time_call(lambda: op(*targs, **tkwargs), device, warmup=int(timing["warmup"]),
                      reps=int(timing["reps"]), target_ms=float(timing["target_ms"]),
                      max_calls=limit, before=restore)
        return ProviderRun(provider, "ok", timing=t)


def _reference(call: OpCall, seed: int) -> tuple[object, list[torch.Tensor]] | str:
    op = call.overload()
    try:
        args, kwargs = call.inputs(torch.device("cpu"), seed)
        out = op(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - an op the CPU cannot run is reported
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return out, _written(op, args, kwargs)


def _choose(op: str, calls: list[CallResult], baseline: str | None, margin: float) -> OpChoice:
    providers = sorted({p for c in calls for p in c.runs})
    eligible = [p for p in providers if all(c.runs[p].status == "ok" for c in calls)]
    totals = {p: (sum(c.call.count * c.runs[p].timing.median_us for c in calls),
                  sum(c.call.count * c.runs[p].timing.spread_us for c in calls))
              for p in eligible}
    notes: list[str] = []
    if not eligible:
        return OpChoice(op, calls, ["cpu"], totals, baseline,
                        ["no provider served every call correctly"])
    order = sorted(eligible, key=lambda p: totals[p][0])
    head = order[0]
    if baseline in totals and baseline != head:
        (b, bs), (f, fs) = totals[baseline], totals[head]
        if b - f <= max(bs + fs, margin * b):
            notes.append(f"{head} measured faster ({f:.1f} vs {b:.1f} us) but within the noise "
                         f"margin: {baseline} kept")
            head = baseline
    chain = [head] + [p for p in order if p != head]
    if chain[-1] != "cpu":
        chain = [p for p in chain if p != "cpu"] + ["cpu"]
    for c in calls:
        best = min((p for p in eligible), key=lambda p: c.runs[p].timing.median_us)
        hb, bb = c.runs[head].timing, c.runs[best].timing
        if best != head and hb.median_us - bb.median_us > max(hb.spread_us + bb.spread_us,
                                                              margin * hb.median_us):
            notes.append(f"shape-dependent: on {c.call.signature()} {best} is faster "
                         f"({bb.median_us:.1f} vs {hb.median_us:.1f} us per call)")
    return OpChoice(op, calls, chain, totals, baseline, notes)


def tune(workload: Workload, *, device: int = 0, providers: Sequence[str] | None = None,
         warmup: int = 3, reps: int = 10, target_ms: float = 2.0, max_calls: int = 200,
         margin: float = 0.02, tolerance: float = 1.0, seed: int = 0,
         progress: Callable[[str], None] | None = None) -> TuneResult:
    """Measure every call of ``workload`` on every provider (``providers``: default, all
    installed, ``cpu`` included; the chains written end with ``cpu`` either way) on flagos
    device ``device`` and choose each op's chain (see the module
    docstring). ``tolerance`` scales the dtype tolerances of the correctness check;
    ``margin`` is the least fraction by which a provider must beat the baseline."""
    names = list(providers) if providers is not None else candidate_providers()
    unknown = set(names) - set(candidate_providers())
    if unknown:
        raise ValueError(f"not installed providers: {', '.join(sorted(unknown))}; installed: "
                         f"{', '.join(candidate_providers())}")
    hal = routing.table.device_hals()[device]
    unavailable = {}
    for p in list(names):
        why = _unavailable(p, hal)
        if why:
            unavailable[p] = why
            names.remove(p)
    timing = {"warmup": warmup, "reps": reps, "target_ms": target_ms, "max_calls": max_calls}
    choices: list[OpChoice] = []
    for op in workload.ops():
        calls = [c for c in workload.calls if c.whole_op == op]
        baseline = routing.table.decide(calls[0].op, hal).chain[0]
        results: list[CallResult] = []
        for call in calls:
            result = CallResult(call)
            reference = _reference(call, seed)
            for p in names:
                if isinstance(reference, str):
                    result.runs[p] = ProviderRun(p, "error", f"the CPU reference failed: {reference}")
                    continue
                result.runs[p] = _run_one(call, p, device, hal, reference, timing, tolerance, seed)
            results.append(result)
            if progress is not None:
                progress(f"{call.op} {call.signature()}: " + ", ".join(
                    f"{p} {r.timing.median_us:.1f} us" if r.timing else f"{p} {r.status}"
                    for p, r in result.runs.items()))
        choices.append(_choose(op, results, baseline, margin))
    props = torch.flagos.get_device_properties(device)
    settings = {"warmup": warmup, "reps": reps, "target_ms": target_ms, "margin": margin,
                "tolerance": tolerance, "providers": names, "unavailable": unavailable}
    return TuneResult(device, hal, props.name, workload.name, choices, settings)
