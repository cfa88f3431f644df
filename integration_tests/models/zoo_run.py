"""Runs zoo cases in this process and prints each record as one JSON line.

    python integration_tests/models/zoo_run.py [--mode MODE] [--shadow] NAME...

The opaque-memory tests start it with FLAGOS_NO_HOST_ALIAS=1, which flagos reads when it
loads, so it needs a process of its own.

``--shadow`` checks every routed op call of each case against torch's CPU kernels on
copies of its inputs (shadow verification at rate 1, without quarantine) and prints the
(op, provider) pairs that mismatched, with the last error and the tensor arguments of that
call (where a model's difference comes from), and the calls the reference could not run."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from zoo_cases import CASES
from zoo_check import run_case


def _print_mismatches(name: str) -> None:
    import flagos
    from flagos.routing import shadow

    rows = [(op, p, r) for op, by in sorted(flagos.routing.stats().items())
            for p, r in by.items() if r.get("mismatches")]
    checked = sum(r.get("shadowed", 0) for by in flagos.routing.stats().values()
                  for r in by.values())
    print(f"ZOO-SHADOW {name}: {checked} calls checked, {len(rows)} (op, provider) pairs "
          "mismatched", flush=True)
    for op, provider, r in rows:
        print(f"  {op} [{provider}] {r['mismatches']} of {r['shadowed']} calls; last: "
              f"{r['last_inputs']}: {r['last_error']}", flush=True)
    for op, by in sorted(flagos.routing.stats().items()):  # the reference could not run
        for provider, r in by.items():
            if r.get("unchecked"):
                print(f"  unchecked: {op} [{provider}] {r['unchecked']} calls: "
                      f"{r['last_unchecked']}", flush=True)
    shadow.reset_counts()
    flagos.routing.reset_stats()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", choices=sorted(CASES), metavar="NAME")
    parser.add_argument("--mode", default="eager", help="the mode named in the records")
    parser.add_argument("--shadow", action="store_true",
                        help="check every op call against the CPU; print the mismatches")
    args = parser.parse_args()
    if args.shadow:
        from flagos.routing import shadow

        shadow.enable("*", rate=1.0)
    torch.backends.cudnn.allow_tf32 = False  # as the zoo's conftest: fp32 comparisons
    torch.backends.cuda.matmul.allow_tf32 = False
    failed = 0
    for name in args.names:
        try:
            record = run_case(CASES[name], mode=args.mode)
        except Exception:  # noqa: BLE001 - recorded and reported; the next case still runs
            from zoo_check import RESULTS

            record = RESULTS[-1]
            failed += 1
        print("ZOO-RESULT " + json.dumps(record), flush=True)
        if args.shadow:
            _print_mismatches(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
