"""``python -m flagos info``: what this installation of flagos sees (flagos.info);
``python -m flagos tune``: route autotuning (flagos.tuning.cli).

``--json`` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from flagos.info import collect, format_info


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m flagos`` and the ``flagos`` script."""
    parser = argparse.ArgumentParser(prog="python -m flagos",
                                     description="flagos device information and route tuning")
    sub = parser.add_subparsers(dest="command")
    info = sub.add_parser("info", help="HALs, devices, memory, op providers, routing table")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    from flagos.tuning import cli as tune_cli

    tune_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "tune":
        return tune_cli.run(args)
    if args.command != "info":
        parser.print_help()
        return 2
    data = collect()
    print(json.dumps(data, indent=2) if args.json else format_info(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
