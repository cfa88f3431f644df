"""`python -m flagos_hal COMMAND`: new-vendor (scaffold a HAL package), list (discovery),
conformance (same as python -m flagos_hal.conformance), count-lines (lines of code of HAL
sources)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["conformance"]:
        from flagos_hal.conformance import main as conformance

        return conformance(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m flagos_hal")
    sub = ap.add_subparsers(dest="command", required=True)
    nv = sub.add_parser("new-vendor", help="write a new HAL package that passes conformance")
    nv.add_argument("name", help="HAL name, lowercase (e.g. 'ascend')")
    nv.add_argument("--dir", default=".", help="where to create flagos-hal-NAME/")
    sub.add_parser("list", help="show the HALs discover() picks and every registered one")
    sub.add_parser("conformance", help="run the conformance suite (see its --help)")
    cl = sub.add_parser("count-lines", help="lines of code (not blank, not comment) of C/C++ files")
    cl.add_argument("paths", nargs="+", help="files, or directories (their C/C++ files)")
    args = ap.parse_args(argv)
    if args.command == "count-lines":
        from flagos_hal.linecount import report

        try:
            print(report(args.paths))
        except FileNotFoundError as e:
            print(e, file=sys.stderr)
            return 2
        return 0
    if args.command == "new-vendor":
        from flagos_hal.scaffold import new_vendor

        try:
            root = new_vendor(args.name, args.dir)
        except (ValueError, FileExistsError) as e:
            print(e, file=sys.stderr)
            return 2
        print(f"wrote {root}\nnext: pip install --no-build-isolation {root} && "
              f"python -m flagos_hal.conformance --hal {args.name}")
        return 0
    from flagos_hal.discovery import available, discover

    print("registered (flagos.hal):", ", ".join(available()) or "none")
    for spec in discover():
        print(f"selected: {spec.name}  {spec.path}  [{spec.origin}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
