"""Renders the zoo's JSON results (FLAGOS_ZOO_RESULTS) as a markdown table.

    python integration_tests/models/zoo_table.py RESULTS.json [--update docs/models.md]

With --update, the table replaces the one between the file's ``<!-- zoo:HAL -->`` and
``<!-- /zoo:HAL -->`` markers (HAL: the results' HAL, e.g. sim or cuda)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

COLUMNS = ["forward", "train", "generate", "pipeline"]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "0" if value == 0 else f"{value:.1e}"
    return str(value)


def render(records: list[dict]) -> str:
    """One row per (model, HAL, mode): the largest difference of each check against the
    CPU (an empty cell: not checked), its status and seconds."""
    lines = [("| model | library | HAL | mode | forward | train | generate | pipeline image "
              "| status | s |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        cells = [r["model"], r["library"], r["hal"], r["mode"], *(_cell(r.get(c)) for c in COLUMNS),
                 r["status"] + (f": {r['error']}" if r.get("error") else ""), f"{r.get('seconds', 0):.1f}"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--update", type=Path, help="markdown file with <!-- zoo:HAL --> markers")
    args = parser.parse_args()
    records = json.loads(args.results.read_text())
    table = render(records)
    if not args.update:
        sys.stdout.write(table)
        return 0
    hals = {r["hal"] for r in records}
    if len(hals) != 1:
        parser.error(f"--update needs the results of one HAL, got {sorted(hals)}")
    hal = hals.pop()
    text = args.update.read_text()
    pattern = re.compile(rf"(<!-- zoo:{hal} -->\n).*?(<!-- /zoo:{hal} -->)", re.DOTALL)
    if not pattern.search(text):
        parser.error(f"{args.update} has no <!-- zoo:{hal} --> ... <!-- /zoo:{hal} --> markers")
    args.update.write_text(pattern.sub(lambda m: m.group(1) + table + m.group(2), text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
