"""Runs zoo cases in this process and prints each record as one JSON line.

    python integration_tests/models/zoo_run.py [--mode MODE] [--shadow]
        [--kernel-library MODULE:CLASS] NAME...

The opaque-memory tests start it with FLAGOS_NO_TWIN=1, which flagos reads when it
loads, so it needs a process of its own.

``--shadow`` checks every routed op call of each case against torch's CPU kernels on
copies of its inputs (shadow verification at rate 1, without quarantine) and prints the
(op, provider) pairs that mismatched, with the last error and the tensor arguments of that
call (where a model's difference comes from), and the calls the reference could not run.

``--kernel-library MODULE:CLASS`` serves every op that a Python kernel library
(a ``flagos_ops_gems.KernelLibrary``, importable as ``MODULE``) implements with it, as
provider ``library`` ahead of ``boxing`` and ``cpu``; each record counts its calls per op
(``library_calls``). A vendor's own Triton kernels run through the zoo this way."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import flagos
import torch
from flagos.routing import shadow
from zoo_cases import CASES
from zoo_check import RESULTS, run_case


def _print_mismatches(name: str) -> None:
    stats = sorted(flagos.routing.stats().items())
    rows = [(op, p, r) for op, by in stats for p, r in by.items() if r.get("mismatches")]
    checked = sum(r.get("shadowed", 0) for _, by in stats for r in by.values())
    print(f"ZOO-SHADOW {name}: {checked} calls checked, {len(rows)} (op, provider) pairs "
          "mismatched", flush=True)
    for op, provider, r in rows:
        print(f"  {op} [{provider}] {r['mismatches']} of {r['shadowed']} calls; last: "
              f"{r['last_inputs']}: {r['last_error']}", flush=True)
    for op, by in stats:  # the reference could not run
        for provider, r in by.items():
            if r.get("unchecked"):
                print(f"  unchecked: {op} [{provider}] {r['unchecked']} calls: "
                      f"{r['last_unchecked']}", flush=True)


def _kernel_library_routes(spec: str) -> contextlib.AbstractContextManager:
    """Registers the kernel library ``MODULE:CLASS`` as provider ``library``; the routes
    that put it first, for the ``with`` block of the run."""
    from flagos_ops_gems import register_library

    module, _, cls = spec.partition(":")
    library = getattr(importlib.import_module(module), cls)()
    flagos.routing.register_provider(register_library("library", library))
    return flagos.routing.override({"default": ["library", "boxing", "cpu"]})


def _library_calls() -> dict[str, int]:
    return {op: by["library"]["calls"] for op, by in sorted(flagos.routing.stats().items())
            if by.get("library", {}).get("calls")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", choices=sorted(CASES), metavar="NAME")
    parser.add_argument("--mode", default="eager", help="the mode named in the records")
    parser.add_argument("--shadow", action="store_true",
                        help="check every op call against the CPU; print the mismatches")
    parser.add_argument("--kernel-library", metavar="MODULE:CLASS",
                        help="serve the ops this kernel library implements with it first")
    args = parser.parse_args()
    if args.shadow:
        shadow.enable("*", rate=1.0)
    torch.backends.cudnn.allow_tf32 = False  # as the zoo's conftest: fp32 comparisons
    torch.backends.cuda.matmul.allow_tf32 = False
    routes = _kernel_library_routes(args.kernel_library) if args.kernel_library \
        else contextlib.nullcontext()
    failed = 0
    with routes:
        for name in args.names:
            try:
                record = run_case(CASES[name], mode=args.mode)
            except Exception:  # noqa: BLE001 - recorded and reported; the next case runs
                record = RESULTS[-1]
                failed += 1
            if args.kernel_library:
                record["library_calls"] = _library_calls()
            print("ZOO-RESULT " + json.dumps(record), flush=True)
            if args.shadow:
                _print_mismatches(name)
                shadow.reset_counts()
            flagos.routing.reset_stats()  # each case's counts are its own
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
