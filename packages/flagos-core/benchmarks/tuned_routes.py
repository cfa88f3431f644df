"""Tuned routes against single-provider routes, for the TinyLlama training step.

In one run: record the step's workload, tune it (``flagos.tuning.tune``), then

- time the whole training step (forward, backward, AdamW) with the tuned routing file and
  with each single-provider routing (boxing-only, gems-only, ... for the installed
  providers), median of timed steps, HAL events;
- measure every op again, independently of the tuning run, and compare the time of the
  provider the tuned file chose with the fastest provider of that second measurement.

    python packages/flagos-core/benchmarks/tuned_routes.py [--size default] [--json PATH]

Prints a table; ``--json`` also writes the rows (docs/benchmarks.md's format).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import flagos
import torch
from flagos import routing, tuning
from flagos.tuning import tinyllama

SINGLE = {"boxing": "default=boxing,cpu", "gems": "default=gems,boxing,cpu",
          "native": "default=native,boxing,cpu"}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _machine() -> str:
    name = torch.flagos.get_device_properties(0).name
    return name if name else platform.processor() or platform.machine()


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="default", choices=sorted(tinyllama.CONFIGS))
    ap.add_argument("--providers", help="providers to tune over (default: installed, not cpu)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=1.0,
                    help="multiplier of the dtype tolerances of the correctness check")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--routes", type=Path, help="also keep the tuned routing file here")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    providers = ([p.strip() for p in args.providers.split(",")] if args.providers else
                 [p for p in tuning.candidate_providers() if p != "cpu"])
    hal = routing.table.device_hals()[0]
    available = [p for p in providers if _usable(p, hal)]
    print(f"flagos:0 {_machine()} (HAL {hal}); providers: {', '.join(available)}", flush=True)
    workload = tinyllama.record_training_step(args.size)
    print(f"workload: {len(workload.ops())} ops, {len(workload.calls)} distinct calls", flush=True)
    tuned = tuning.tune(workload, providers=available, reps=args.reps, tolerance=args.tolerance)
    routes = args.routes or Path(tempfile.mkdtemp()) / "tuned.toml"
    tuning.write_routes(tuned, routes)
    print(f"tuned routes: {routes}", flush=True)

    rows: list[list] = []
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
    best_single = min((k for k in steps if k != "tuned"), key=steps.get, default=None)
    for name, ms in steps.items():
        rows.append(["step", "training step", name, round(ms * 1000.0, 1),
                     best_single, round(steps[best_single] * 1000.0, 1) if best_single else None,
                     round(ms / steps["tuned"], 3)])

    # A second, independent measurement of every op: the chosen provider against the fastest.
    check = tuning.tune(workload, providers=available, reps=args.reps,
                        tolerance=args.tolerance)
    by_op = {c.op: c for c in check.choices}
    worst = 1.0
    for c in tuned.choices:
        m = by_op[c.op]
        if c.chosen not in m.totals or not m.totals:
            rows.append(["op", c.op, c.chosen, None, m.fastest(), None, None])
            continue
        fastest = m.fastest()
        ratio = m.totals[c.chosen][0] / m.totals[fastest][0]
        worst = max(worst, ratio)
        rows.append(["op", c.op, c.chosen, round(m.totals[c.chosen][0], 1), fastest,
                     round(m.totals[fastest][0], 1), round(ratio, 3)])

    cols = ["kind", "name", "route", "time_us", "fastest", "fastest_us", "ratio"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join("" if v is None else str(v) for v in r))
    print(f"tuned step vs best single-provider step ({best_single}): "
          f"{steps['tuned'] / steps[best_single]:.3f}x" if best_single else "no single route")
    print(f"worst op: chosen / fastest = {worst:.3f}x (goal <= 1.05)")
    if args.json:
        command = "python packages/flagos-core/benchmarks/tuned_routes.py " + " ".join(
            a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--json")
        ).strip()
        data = {"benchmark": "tuned_routes",
                "title": f"Tuned routes vs single-provider routes, TinyLlama training step "
                         f"({args.size})",
                "machine": _machine(), "torch": torch.__version__, "commit": _commit(),
                "command": command.strip(), "columns": cols, "rows": rows,
                "notes": [
                    ("step rows: median time of one training step (forward, backward, AdamW) "
                     "under each routing, HAL events; ratio = that route's step time / the "
                     "tuned route's (above 1: the tuned routes are faster)"),
                    ("op rows: workload-weighted time of the op (sum over its calls of count x "
                     "median) for the provider the tuned file chose and for the fastest "
                     "provider, both from a second measurement made after tuning; ratio = "
                     "chosen / fastest (goal <= 1.05)"),
                    f"providers: {', '.join(available)}; flagos {flagos.__version__}"]}
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


def _usable(provider: str, hal: str) -> bool:
    p = routing.providers().get(provider)
    if p is None:
        return provider in routing.table._state.backend.cpp_providers()
    try:
        return not p.unavailable_on(hal) and (p.hals is None or hal in p.hals)
    except Exception:  # noqa: BLE001 - a broken provider is left out
        return False


if __name__ == "__main__":
    sys.exit(main())
