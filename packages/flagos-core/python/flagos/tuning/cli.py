"""``python -m flagos tune``: tune the routes of a workload and write a routing file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .hot_ops import SIZES, hot_ops
from .routes_file import write_routes
from .tinyllama import CONFIGS, record_training_step
from .tuner import TuneResult, tune
from .workload import Workload

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``tune`` subcommand's arguments."""
    p = sub.add_parser("tune", help="measure every provider per op, write a routing file",
                       description="Run each op of a workload on every installed provider on "
                       "a flagos device, check it against the CPU, and write a routing file "
                       "choosing the fastest correct provider per op (docs/tuning.md).")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", type=Path, help="a workload file (JSON, from record)")
    src.add_argument("--builtin", choices=sorted(SIZES), default=None,
                     help="the built-in hot-op shapes at this size (the default: 'default')")
    src.add_argument("--tinyllama", choices=sorted(CONFIGS),
                     help="record one TinyLlama training step at this size and tune it")
    p.add_argument("--save-workload", type=Path, help="also write the workload used here")
    p.add_argument("--ops", help="only these ops (comma-separated, e.g. aten::mm,aten::add)")
    p.add_argument("--providers", help="only these providers (comma-separated; default: every "
                   "installed one, cpu included)")
    p.add_argument("--device", type=int, default=0, help="flagos device index (default 0)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up batches per call")
    p.add_argument("--reps", type=int, default=10, help="timed batches per call")
    p.add_argument("--target-ms", type=float, default=2.0, help="time per batch (ms)")
    p.add_argument("--margin", type=float, default=0.02,
                   help="fraction by which a provider must beat the current route (0.02)")
    p.add_argument("--tolerance", type=float, default=1.0,
                   help="multiplier of the dtype tolerances of the correctness check")
    p.add_argument("-o", "--output", type=Path, default=Path("flagos-routes.toml"),
                   help="the routing file to write (default flagos-routes.toml)")
    p.add_argument("--json", type=Path, help="also write every measurement as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-call progress lines")


def _workload(args: argparse.Namespace) -> Workload:
    if args.workload is not None:
        return Workload.load(args.workload)
    if args.tinyllama is not None:
        return record_training_step(args.tinyllama)
    return hot_ops(args.builtin or "default")


def result_json(result: TuneResult) -> dict:
    """Every measurement of a tuning run as plain data."""
    ops = []
    for c in result.choices:
        calls = []
        for r in c.calls:
            calls.append({"op": r.call.op, "count": r.call.count, "inputs": r.call.signature(),
                          "providers": {p: {"status": run.status, "detail": run.detail,
                                            "median_us": run.timing.median_us if run.timing else None,
                                            "spread_us": run.timing.spread_us if run.timing else None}
                                        for p, run in r.runs.items()}})
        ops.append({"op": c.op, "chain": c.chain, "baseline": c.baseline,
                    "totals_us": {p: t[0] for p, t in c.totals.items()}, "notes": c.notes,
                    "calls": calls})
    return {"device": result.device, "hal": result.hal, "device_name": result.device_name,
            "workload": result.workload, "settings": result.settings, "ops": ops}


def run(args: argparse.Namespace) -> int:
    """Run the ``tune`` subcommand."""
    try:
        workload = _workload(args)
    except ValueError as e:
        print(f"flagos tune: {e}", file=sys.stderr)
        return 2
    if args.ops:
        workload = workload.select(o.strip() for o in args.ops.split(","))
    if not workload.calls:
        print("flagos tune: the workload has no routed op calls", file=sys.stderr)
        return 2
    if args.save_workload:
        workload.save(args.save_workload)
    providers = [p.strip() for p in args.providers.split(",")] if args.providers else None
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        result = tune(workload, device=args.device, providers=providers, warmup=args.warmup,
                      reps=args.reps, target_ms=args.target_ms, margin=args.margin,
                      tolerance=args.tolerance, progress=progress)
    except ValueError as e:
        print(f"flagos tune: {e}", file=sys.stderr)
        return 2
    path = write_routes(result, args.output)
    if args.json:
        args.json.write_text(json.dumps(result_json(result), indent=1) + "\n")
    changed = [c for c in result.choices if c.baseline != c.chosen]
    print(f"wrote {path}: {len(result.choices)} ops tuned on flagos:{result.device} "
          f"(HAL {result.hal}), {len(changed)} routed differently than before")
    for c in changed:
        print(f"  {c.op}: {c.baseline} -> {c.chosen}")
    return 0
