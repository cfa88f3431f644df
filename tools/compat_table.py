"""Writes the tables of docs/compat.md from the compat sessions' results.

Each ``nox -s "compat(torch='2.X')"`` run leaves docs/compat/torch-2.X.json, each
``nox -s "libraries(releases='newest|oldest')"`` run docs/compat/libraries-*.json; this
script renders them into the tables between the markers of docs/compat.md.

    python tools/compat_table.py            # rewrite the table in docs/compat.md
    python tools/compat_table.py --check    # exit 1 if docs/compat.md is out of date
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "compat"
PAGE = ROOT / "docs" / "compat.md"
BEGIN, END = "<!-- compat table: begin -->", "<!-- compat table: end -->"
LIB_BEGIN, LIB_END = "<!-- library table: begin -->", "<!-- library table: end -->"


def _release_key(path: pathlib.Path) -> tuple[int, ...]:
    return tuple(int(x) for x in path.stem.removeprefix("torch-").split("."))


def _tests_cell(tests: dict) -> str:
    passed = sum(t["passed"] for t in tests.values())
    skipped = sum(t["skipped"] for t in tests.values())
    failed = [name for t in tests.values() for name in t["failed"]]
    cell = f"{passed} passed, {skipped} skipped"
    if failed:
        cell += f", **{len(failed)} failed**: " + "; ".join(f"`{f}`" for f in failed)
    return cell


def table() -> str:
    """The markdown table, one row per release with results."""
    header = ("| torch | build | HAL conformance | sim test suite | CUDA results allocator "
              "| commit | command |")
    rows = [header, "|---|---|---|---|---|---|---|"]
    for path in sorted(RESULTS.glob("torch-*.json"), key=_release_key):
        r = json.loads(path.read_text())
        tests = _tests_cell(r["tests"]) if "tests" in r else "not run"
        rows.append(f"| {r['torch']} | {r['build']} | {r.get('conformance', 'not run')} "
                    f"| {tests} | {r.get('cuda_allocator', 'not checked')} | {r['commit']} "
                    f"| `{r['command']}` |")
    return "\n".join(rows)


def library_table() -> str:
    """The markdown table of the libraries: the range allowed, the releases each run
    tested, and that run's results."""
    runs = {p.stem.removeprefix("libraries-"): json.loads(p.read_text())
            for p in sorted(RESULTS.glob("libraries-*.json"))}
    order = [r for r in ("newest", "oldest") if r in runs]
    if not order:
        return "No results yet."
    allowed = {}
    for r in order:
        allowed.update(runs[r]["allowed"])
    rows = ["| library | allowed | " + " | ".join(f"{r} tested" for r in order) + " |",
            "|---|---|" + "---|" * len(order)]
    for name, spec in allowed.items():
        rows.append(f"| {name} | `{spec}` | "
                    + " | ".join(runs[r]["versions"].get(name, "not installed") for r in order) + " |")
    rows.append("| **sim tests** (model zoo, flagos-quant, flagos-compile) | | "
                + " | ".join(_tests_cell(runs[r]["tests"]) for r in order) + " |")
    rows.append("| commit, command | | "
                + " | ".join(f"{runs[r]['commit']}, `{runs[r]['command']}`" for r in order) + " |")
    return "\n".join(rows)


def _replace(page: str, begin: str, end: str, text: str) -> str:
    head, _, rest = page.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{text}\n{end}{tail}"


def render(page: str) -> str:
    """``page`` with the text between each pair of markers replaced by its current table."""
    page = _replace(page, BEGIN, END, table())
    if LIB_BEGIN in page:
        page = _replace(page, LIB_BEGIN, LIB_END, library_table())
    return page


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check the page is current")
    args = parser.parse_args()
    page = PAGE.read_text()
    new = render(page)
    if args.check:
        if new != page:
            print("docs/compat.md is out of date: run python tools/compat_table.py")
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
