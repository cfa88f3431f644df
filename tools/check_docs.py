#!/usr/bin/env python3
"""Checks that the docs describe the system, not the history of its making.

    python tools/check_docs.py

Over README.md, CONTRIBUTING.md and docs/**/*.md: no issue numbers ("issue 12"), and the
word "session" only where it names a nox session (the line names nox or one of the
project's nox sessions). Prints each offending line as FILE:LINE: TEXT and exits 1.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOX_SESSIONS = ("lint", "tests", "bench", "compat", "build", "demo", "conformance")
ISSUE = re.compile(r"\bissues? #?[0-9]+", re.IGNORECASE)
SESSION = re.compile(r"session", re.IGNORECASE)
NOX_LINE = re.compile(r"\bnox\b|" + "|".join(
    rf"\b{s}\b[`'\")]*\s+sessions?\b|\bsessions?\s+[`'\"(]*{s}\b" for s in NOX_SESSIONS),
    re.IGNORECASE)


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if p.exists()]


def problems(path: Path) -> list[str]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        where = f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        if ISSUE.search(line):
            out.append(where + "   (an issue number)")
        elif SESSION.search(line) and not NOX_LINE.search(line):
            out.append(where + "   ('session' that is not a nox session)")
    return out


def main() -> int:
    found = [p for page in pages() for p in problems(page)]
    for p in found:
        print(p)
    if found:
        print(f"{len(found)} lines speak of the work's history, not of the system "
              "(see CONTRIBUTING.md, docs)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
