"""Tuned routes against single-provider routes, for the TinyLlama training step.

In one run: record the step's workload, tune it (``flagos.tuning.tune``), then

- time the whole training step (forward, backward, AdamW) with the tuned routing file and
  with each single-provider routing (boxing-only, gems-only, native-only, for the
  providers installed), median of timed steps, HAL events;
- measure every op again, independently of the tuning run, and compare the time of the
  provider the tuned file chose with the fastest provider of that second measurement.

    python packages/flagos-core/benchmarks/tuned_routes.py [--size default] [--json PATH]

Prints the tables; ``--json`` also writes them (flagos.bench_results).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from flagos import routing, tuning
from flagos.bench_results import Plot, Table, write_json
from flagos.tuning import tinyllama

# Each provider alone, with boxing (then cpu) for what it does not serve.
SINGLE = {"boxing": "default=boxing,cpu", "gems": "default=gems,boxing,cpu",
          "native": "default=native,boxing,cpu"}


def step_ms(size: str, warmup: int, steps: int) -> float:
    """Median milliseconds of one training step under the routes in force."""
    step = tinyllama.training_step(size, "flagos")
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start, end = torch.flagos.Event(enable_timing=True), torch.flagos.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _usable(provider: str, hal: str) -> bool:
    p = routing.providers().get(provider)
    if p is None:
        return provider in routing.table._state.backend.cpp_providers()
    try:
        return not p.unavailable_on(hal) and (p.hals is None or hal in p.hals)
    except Exception:  # noqa: BLE001 - a broken provider is left out
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="default", choices=sorted(tinyllama.CONFIGS))
    ap.add_argument("--providers", help="providers to tune over (default: installed, not cpu)")
    ap.add_argument("--reps", type=int, default=10, help="timed batches per op call")
    ap.add_argument("--steps", type=int, default=10, help="timed training steps per routing")
    ap.add_argument("--tolerance", type=float, default=1.0,
                    help="multiplier of the dtype tolerances of the correctness check")
    ap.add_argument("--routes", type=Path, help="also keep the tuned routing file here")
    ap.add_argument("--json", default="", help="also write the tables here (JSON)")
    args = ap.parse_args(argv)

    hal = routing.table.device_hals()[0]
    providers = ([p.strip() for p in args.providers.split(",")] if args.providers else
                 [p for p in tuning.candidate_providers() if p != "cpu"])
    available = [p for p in providers if _usable(p, hal)]
    print(f"flagos:0 (HAL {hal}); providers: {', '.join(available)}", flush=True)
    workload = tinyllama.record_training_step(args.size)
    print(f"workload: {len(workload.ops())} ops, {len(workload.calls)} distinct calls", flush=True)
    tuned = tuning.tune(workload, providers=available, reps=args.reps, tolerance=args.tolerance)
    routes = args.routes or Path(tempfile.mkdtemp()) / "tuned.toml"
    tuning.write_routes(tuned, routes)
    print(f"tuned routes: {routes}", flush=True)

    steps: dict[str, float] = {}
    routing.reset()
    routing.load(routes)
    steps["tuned"] = step_ms(args.size, 3, args.steps)
    for p in available:
        if p in SINGLE:
            routing.reset()
            routing.set(SINGLE[p])
            steps[f"{p}-only"] = step_ms(args.size, 3, args.steps)
    routing.reset()
    cfg, batch, seq = tinyllama.CONFIGS[args.size]
    step_table = Table(
        "tuned-routes-step",
        f"Tuned routes vs single-provider routes: TinyLlama {cfg.n_layers}x{cfg.dim} "
        f"float32 training step, batch {batch}x{seq}",
        ["routes", "ms per step", "vs tuned"],
        notes=[("median of timed training steps (forward, backward, AdamW), HAL events; "
                "'vs tuned' = that routing's step time / the tuned routing's (above 1: the "
                "tuned routes are faster)"),
               "X-only: every op that X serves goes to X, the rest to boxing, then cpu",
               f"tuned over: {', '.join(available)}"],
        plot=Plot("bar", "routes", ["vs tuned"], "step time / tuned", reference=1.0))
    for name, ms in steps.items():
        step_table.add(name, ms, ms / steps["tuned"])

    # A second, independent measurement of every op: the chosen provider against the fastest.
    check = tuning.tune(workload, providers=available, reps=args.reps, tolerance=args.tolerance)
    by_op = {c.op: c for c in check.choices}
    op_table = Table(
        "tuned-routes-ops",
        "Per op of the TinyLlama training step: the tuned route's provider vs the fastest",
        ["op", "chosen", "chosen us", "fastest", "fastest us", "chosen / fastest"],
        notes=[("workload-weighted time of the op (sum over its calls of count x median per "
                "call), from a second measurement made after tuning; goal: chosen / fastest "
                "<= 1.05")],
        plot=Plot("bar", "op", ["chosen / fastest"], "chosen / fastest", reference=1.0))
    unmeasured = []
    for c in tuned.choices:
        m = by_op[c.op]
        fastest = m.fastest()
        if fastest is None or c.chosen not in m.totals:
            unmeasured.append(f"{c.op} ({c.chosen})")
            continue
        op_table.add(c.op, c.chosen, m.totals[c.chosen][0], fastest, m.totals[fastest][0],
                     m.totals[c.chosen][0] / m.totals[fastest][0])
    if unmeasured:
        op_table.notes.append("not eligible in the second measurement: " + ", ".join(unmeasured))
    print(step_table.format())
    print(op_table.format())
    if args.json:
        write_json(args.json, [step_table, op_table])
    return 0


if __name__ == "__main__":
    sys.exit(main())
