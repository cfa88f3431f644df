"""Writes the support table of docs/compat.md from the compat sessions' results.

Each ``nox -s "compat(torch='2.X')"`` run leaves docs/compat/torch-2.X.json; this script
renders every such file into the table between the markers of docs/compat.md.

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


def render(page: str) -> str:
    """``page`` with the text between the markers replaced by the current table."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


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
