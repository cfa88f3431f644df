"""OpInfo sweep through gems routes against FlagGems on plain CUDA tensors, one run.

    python packages/flagos-ops-gems/benchmarks/opinfo_vs_flaggems.py [--all] [--jobs J]
        [--max-samples N] [--json out.json]

Runs integration_tests/opinfo_sweep.py twice on the same OpInfos: ``--route gems,boxing``
(flagos tensors, every op FlagGems serves on FlagGems, the rest on boxing) and
``--route flaggems-cuda`` (no flagos: CUDA tensors with ``flag_gems.enable()``), both
against the CPU. Prints both counts and the differences: OpInfos that pass with FlagGems
on CUDA but fail through flagos (what flagos must fix), and the reverse. By default only
the OpInfos whose name is one of FlagGems' ops (``aten::softmax`` -> ``softmax``) run;
``--all`` runs every OpInfo.
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


def _sweep(route: str, ops: list[str], args, out_json: str) -> dict:
    cmd = [sys.executable, SWEEP, "--route", route, "--max-samples", str(args.max_samples),
           "--jobs", str(args.jobs), "--timeout", str(args.timeout), "--json", out_json]
    if ops:
        cmd += ["--ops", ",".join(ops)]
    print(f"# {' '.join(cmd[:8])} ... ({len(ops) or 'all'} OpInfos)", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    tail = "\n".join(r.stdout.splitlines()[:6])
    print(tail, flush=True)
    with open(out_json) as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="every OpInfo, not only FlagGems' ops")
    ap.add_argument("--jobs", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--max-samples", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--json", default="", help="write both results and the differences")
    args = ap.parse_args(argv)
    ops = [] if args.all else _opinfo_names(set(_flag_gems_op_names()))
    with tempfile.TemporaryDirectory() as tmp:
        gems = _sweep("gems,boxing", ops, args, os.path.join(tmp, "gems.json"))
        ref = _sweep("flaggems-cuda", ops, args, os.path.join(tmp, "ref.json"))
    status = {name: {r["op"]: r for r in run["results"]} for name, run in
              (("gems", gems), ("flaggems", ref))}
    both = sorted(set(status["gems"]) & set(status["flaggems"]))

    def st(name: str, op: str) -> str:
        return status[name][op]["status"]

    only_ref = [op for op in both if st("flaggems", op) == "pass" and st("gems", op) == "fail"]
    only_gems = [op for op in both if st("gems", op) == "pass" and st("flaggems", op) == "fail"]
    print()
    print(f"{'':24}{'passed':>8}{'failed':>8}{'skipped':>9}")
    for label, run in (("flagos gems,boxing", gems), ("FlagGems on CUDA", ref)):
        s = run["summary"]
        print(f"{label:24}{s['passed']:>8}{s['failed']:>8}{s['skipped']:>9}")
    print(f"\npass with FlagGems on CUDA, fail through flagos ({len(only_ref)}):")
    for op in only_ref:
        print(f"  {op}: {status['gems'][op].get('error', '')[:200]}")
    print(f"\npass through flagos, fail with FlagGems on CUDA ({len(only_gems)}):")
    for op in only_gems:
        print(f"  {op}: {status['flaggems'][op].get('error', '')[:200]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gems": gems, "flaggems_cuda": ref, "fail_only_through_flagos": only_ref,
                       "fail_only_on_flaggems": only_gems}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
