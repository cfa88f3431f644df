"""`python -m flagos_hal count-lines PATH...`: lines of code of HAL sources.

Counts the lines of C and C++ files (.c .cc .cpp .h .hpp) that hold code: blank lines and
lines holding only comments do not count. A directory counts every such file directly in
it. Prints one row per file and a total per argument, e.g.

    python -m flagos_hal count-lines packages/flagos-hal/src/cuda packages/flagos-hal/src/sim
"""

from __future__ import annotations

import pathlib
import re

SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp")
# A string or character literal, a // comment, or a /* */ comment (possibly unterminated).
_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?(?:\*/|\Z)', re.DOTALL)


def code_lines(text: str) -> int:
    """Lines of `text` (C/C++) that keep something other than whitespace once comments go."""

    def blank_comment(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith(("//", "/*")):
            return "\n" * s.count("\n")  # keep the line structure
        return s

    stripped = _TOKEN.sub(blank_comment, text)
    return sum(1 for line in stripped.splitlines() if line.strip())


def source_files(path: pathlib.Path) -> list[pathlib.Path]:
    """The C/C++ files `path` names: itself, or those directly in the directory."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
    if path.is_file():
        return [path]
    raise FileNotFoundError(f"count-lines: {path} does not exist")


def count(paths: list[str]) -> list[tuple[str, list[tuple[str, int]], int]]:
    """For each path: (path, [(file, code lines)], total)."""
    out = []
    for arg in paths:
        rows = [(str(f), code_lines(f.read_text(errors="replace")))
                for f in source_files(pathlib.Path(arg))]
        out.append((arg, rows, sum(n for _, n in rows)))
    return out


def report(paths: list[str]) -> str:
    """The table `python -m flagos_hal count-lines` prints."""
    lines = []
    for arg, rows, total in count(paths):
        for name, n in rows:
            lines.append(f"{n:6d}  {name}")
        lines.append(f"{total:6d}  total of {arg} ({len(rows)} files)")
        lines.append("")
    return "\n".join(lines).rstrip()
