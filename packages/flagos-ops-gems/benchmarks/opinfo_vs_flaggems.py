"""OpInfo sweep through gems routes against FlagGems on plain CUDA tensors, one run.

    python packages/flagos-ops-gems/benchmarks/opinfo_vs_flaggems.py [--all] [--jobs J]
        [--max-samples N] [--layouts noncontiguous,channels_last] [--json tables.json]
        [--raw-json out.json] [--log-dir DIR] [--no-twin]

Runs integration_tests/opinfo_sweep.py twice on the same OpInfos: ``--route gems,boxing``
(flagos tensors, every op FlagGems serves on FlagGems, the rest on boxing) and
``--route flaggems-cuda`` (no flagos: CUDA tensors with ``flag_gems.enable()``), both
against the CPU. Prints both counts and the differences: OpInfos that pass with FlagGems
on CUDA but fail through flagos (what flagos must fix), and the reverse. By default only
the OpInfos whose name is one of FlagGems' ops (``aten::softmax`` -> ``softmax``) run;
``--all`` runs every OpInfo. ``--layouts`` also runs each sample with non-contiguous and
channels-last tensors (opinfo_sweep.py): where kernels that assume contiguous inputs are
wrong, and OpInfo's own samples are mostly contiguous. ``--no-twin`` runs the flagos
sweep with ``FLAGOS_NO_TWIN=1`` and ``--route gems``: FlagGems on the flagos tensors
themselves, launched through the HAL, as on a chip without CUDA (boxing does not exist
there; the CPU fallback serves the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SWEEP = os.path.join(ROOT, "integration_tests", "opinfo_sweep.py")


def _flag_gems_op_names() -> list[str]:
    """OpInfo-style names of FlagGems' ops, read in a process without flagos."""
    code = ("import flag_gems, json; print(json.dumps(sorted({k.split('.')[0].strip('_') "
            "for k, *_ in flag_gems._FULL_CONFIG})))")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _opinfo_names(wanted: set[str]) -> list[str]:
    from torch.testing._internal.common_methods_invocations import op_db

    return sorted({op.name for op in op_db if op.name in wanted
                   or op.name.replace(".", "_") in wanted})


def _start_sweep(route: str, ops: list[str], args, jobs: int, out_json: str,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    cmd = [sys.executable, SWEEP, "--route", route, "--max-samples", str(args.max_samples),
           "--jobs", str(jobs), "--timeout", str(args.timeout), "--json", out_json]
    if args.layouts:
        cmd += ["--layouts", args.layouts]
    if args.log_dir:
        cmd += ["--log", os.path.join(args.log_dir, f"sweep-{route.replace(',', '-')}.log")]
    if ops:
        cmd += ["--ops", ",".join(ops)]
    print(f"# {' '.join(cmd[:8])} ... ({len(ops) or 'all'} OpInfos)", flush=True)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)


def _finish_sweep(proc: subprocess.Popen, out_json: str) -> dict:
    out, _ = proc.communicate()
    print("\n".join(out.splitlines()[:6]), flush=True)
    with open(out_json) as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="every OpInfo, not only FlagGems' ops")
    ap.add_argument("--jobs", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--max-samples", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--layouts", default="", help="also these layouts of each sample "
                    "(opinfo_sweep.py --layouts)")
    ap.add_argument("--json", default="", help="write the counts and the differences as "
                    "tables (flagos.bench_results)")
    ap.add_argument("--raw-json", default="", help="write both sweeps' per-OpInfo results")
    ap.add_argument("--log-dir", default="", help="append each sweep's progress lines here")
    ap.add_argument("--no-twin", action="store_true", help="the flagos sweep without a twin "
                    "(FLAGOS_NO_TWIN=1, --route gems)")
    args = ap.parse_args(argv)
    route = "gems" if args.no_twin else "gems,boxing"
    label = "flagos gems (no twin)" if args.no_twin else "flagos gems,boxing"
    flagos_env = {**os.environ, "FLAGOS_NO_TWIN": "1"} if args.no_twin else None
    ops = [] if args.all else _opinfo_names(set(_flag_gems_op_names()))
    with tempfile.TemporaryDirectory() as tmp:
        # Both sweeps at once, the workers split between them: they share the GPU and
        # Triton's kernel cache, and the wall time is what limits a run on a GPU machine.
        half = max(1, args.jobs // 2)
        runs = {r: (_start_sweep(r, ops, args, half, os.path.join(tmp, f"{i}.json"),
                                 flagos_env if r == route else None),
                    os.path.join(tmp, f"{i}.json"))
                for i, r in enumerate((route, "flaggems-cuda"))}
        gems, ref = (_finish_sweep(*runs[r]) for r in (route, "flaggems-cuda"))
    status = {name: {r["op"]: r for r in run["results"]} for name, run in
              (("gems", gems), ("flaggems", ref))}
    both = sorted(set(status["gems"]) & set(status["flaggems"]))

    def st(name: str, op: str) -> str:
        return status[name][op]["status"]

    only_ref = [op for op in both if st("flaggems", op) == "pass" and st("gems", op) == "fail"]
    only_gems = [op for op in both if st("gems", op) == "pass" and st("flaggems", op) == "fail"]
    print()
    print(f"{'':24}{'passed':>8}{'failed':>8}{'skipped':>9}")
    for name, run in ((label, gems), ("FlagGems on CUDA", ref)):
        s = run["summary"]
        print(f"{name:24}{s['passed']:>8}{s['failed']:>8}{s['skipped']:>9}")
    print(f"\npass with FlagGems on CUDA, fail through flagos ({len(only_ref)}):")
    for op in only_ref:
        print(f"  {op}: {status['gems'][op].get('error', '')[:200]}")
    print(f"\npass through flagos, fail with FlagGems on CUDA ({len(only_gems)}):")
    for op in only_gems:
        print(f"  {op}: {status['flaggems'][op].get('error', '')[:200]}")
    if args.raw_json:
        with open(args.raw_json, "w") as f:
            json.dump({"gems": gems, "flaggems_cuda": ref, "fail_only_through_flagos": only_ref,
                       "fail_only_on_flaggems": only_gems}, f, indent=1)
    if args.json:
        from flagos.bench_results import write_json

        write_json(args.json, tables(gems, ref, only_ref, only_gems, status, args.no_twin))
    return 0


def tables(gems: dict, ref: dict, only_ref: list[str], only_gems: list[str], status: dict,
           no_twin: bool = False):
    """The counts of both sweeps and the OpInfos on which they differ, as result tables."""
    from flagos.bench_results import Table

    suffix, label = ("-no-twin", "flagos gems (no twin)") if no_twin else ("", "flagos gems,boxing")
    how = ("on flagos tensors without a twin (FLAGOS_NO_TWIN=1: gems, then the CPU fallback)"
           if no_twin else "through gems routes (gems, then boxing)")
    counts = Table(f"gems-sweep{suffix}", f"gems: OpInfo sweep {how} vs FlagGems on plain CUDA "
                   "tensors (flag_gems.enable()), both against the CPU, OpInfos named like "
                   "FlagGems' ops", ["run", "passed", "failed", "skipped"])
    for label_, run in ((label, gems), ("FlagGems on CUDA", ref)):
        s = run["summary"]
        counts.add(label_, s["passed"], s["failed"], s["skipped"])
    layouts = gems["summary"].get("layouts")
    if layouts:
        counts.notes.append(f"each sample also run with its tensors laid out {layouts}")
    counts.notes.append(f"pass with FlagGems on CUDA, fail through flagos: {len(only_ref)}; "
                        f"pass through flagos, fail with FlagGems on CUDA: {len(only_gems)}")
    diff = Table(f"gems-sweep{suffix}-differences", "gems: OpInfos whose result differs between "
                 f"the gems route{' without a twin' if no_twin else ''} and FlagGems on CUDA",
                 ["OpInfo", "passes on", "error on the other"])
    for op in only_ref:
        diff.add(op, "FlagGems on CUDA", status["gems"][op].get("error", "")[:160])
    for op in only_gems:
        diff.add(op, "flagos gems", status["flaggems"][op].get("error", "")[:160])
    return [counts, diff]


if __name__ == "__main__":
    sys.exit(main())
