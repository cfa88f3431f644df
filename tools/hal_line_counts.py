#!/usr/bin/env python3
"""Writes the HAL line-count tables of docs/hal/tutorial.md and docs/hal/kit.md from the
sources, with ``python -m flagos_hal count-lines``'s counting (lines of C/C++ code, not
blank, not only a comment).

    python tools/hal_line_counts.py [--check]

Each page holds its table between ``hal-line-counts`` markers; ``--check`` fails when a
page differs from what would be written (the numbers are generated, never typed).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HAL = ROOT / "packages" / "flagos-hal"
BEGIN = "<!-- hal-line-counts: begin (tools/hal_line_counts.py writes this) -->"
END = "<!-- hal-line-counts: end -->"
COMMAND = ("python -m flagos_hal count-lines packages/flagos-hal/src/cuda "
           "packages/flagos-hal/src/sim \\\n    packages/flagos-hal/src/scaffold "
           "packages/flagos-hal/include/flagos_hal/kit")
# (name in the tables, what it is, folder, files left out as a part of their own)
SOURCES = [
    ("`cuda` HAL", "on the CUDA driver API ([cuda.md](cuda.md))", "src/cuda", ()),
    ("`sim` HAL", ("a simulated device ([sim.md](sim.md)): an arena allocator, a worker "
                   "thread per stream"), "src/sim",
     ("graph.cpp", "plan.hpp", "plan_kernels.cpp", "kernels.cpp", "capture.cpp")),
    ("`sim` graph runtime", ("the optional graph runtime of the sim ([graph.md](graph.md)): "
                             "plans of its own kernels"), "src/sim",
     ("device.cpp", "memory.cpp", "sim.hpp", "stream.cpp", "kernels.cpp", "capture.cpp")),
    ("`sim` kernel extension", ("the optional kernel extension of the sim ([kernels.md](kernels.md)): "
                                "host libraries of C kernels"), "src/sim",
     ("device.cpp", "memory.cpp", "sim.hpp", "stream.cpp", "graph.cpp", "plan.hpp",
      "plan_kernels.cpp", "capture.cpp")),
    ("`sim` stream capture", ("the optional stream capture of the sim ([capture.md](capture.md)): "
                              "its stream tasks recorded and replayed"), "src/sim",
     ("device.cpp", "memory.cpp", "sim.hpp", "stream.cpp", "graph.cpp", "plan.hpp",
      "plan_kernels.cpp", "kernels.cpp")),
    ("new-vendor scaffold", "what `python -m flagos_hal new-vendor` writes", "src/scaffold", ()),
    ("the kit", "shared by all of them, written once (`include/flagos_hal/kit/`)",
     "include/flagos_hal/kit", ()),
]


def _linecount():
    """flagos_hal.linecount from the source tree (no install needed)."""
    path = HAL / "python" / "flagos_hal" / "linecount.py"
    spec = importlib.util.spec_from_file_location("_hal_linecount", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counts() -> list[tuple[str, str, list[tuple[str, int]], int]]:
    lc = _linecount()
    out = []
    for name, what, folder, left_out in SOURCES:
        files = [(p.name, lc.code_lines(p.read_text())) for p in lc.source_files(HAL / folder)
                 if p.name not in left_out]
        out.append((name, what, files, sum(n for _, n in files)))
    return out


def block(per_file: bool) -> str:
    rows = ["```sh", COMMAND, "```", ""]
    if per_file:
        rows += ["| sources | files | lines of code |", "|---|---|---|"]
        for name, _what, files, total in counts():
            rows.append(f"| {name} | {', '.join(f'`{f}` {n}' for f, n in files)} | {total} |")
    else:
        rows += ["| sources | lines of code (not blank, not comment) |", "|---|---|"]
        for name, what, _files, total in counts():
            rows.append(f"| {name}, {what} | {total} |")
    return "\n".join([BEGIN, *rows, END])


def rewrite(page: Path, per_file: bool) -> tuple[str, str]:
    text = page.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text, text[:start] + block(per_file) + text[end:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when a page is not up to date")
    args = ap.parse_args(argv)
    stale = []
    for page, per_file in ((ROOT / "docs/hal/tutorial.md", False), (ROOT / "docs/hal/kit.md", True)):
        old, new = rewrite(page, per_file)
        if old != new:
            stale.append(page.relative_to(ROOT).as_posix())
            if not args.check:
                page.write_text(new)
    if args.check and stale:
        print(f"out of date (run python tools/hal_line_counts.py): {', '.join(stale)}")
        return 1
    if not args.check:
        print("wrote " + (", ".join(stale) if stale else "nothing (up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
