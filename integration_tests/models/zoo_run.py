"""Runs zoo cases in this process and prints each record as one JSON line.

    python integration_tests/models/zoo_run.py [--mode MODE] NAME...

The opaque-memory tests start it with FLAGOS_NO_HOST_ALIAS=1, which flagos reads when it
loads, so it needs a process of its own."""

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", choices=sorted(CASES), metavar="NAME")
    parser.add_argument("--mode", default="eager", help="the mode named in the records")
    args = parser.parse_args()
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
