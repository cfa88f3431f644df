#!/usr/bin/env python3
"""The test suite's results per test folder, from pytest's JUnit files, as a benchmark-style
JSON table (tools/bench_report.py puts it on docs/benchmarks.md with its commit and command).

    python tools/suite_report.py --junit-dir DIR --hal cuda --command "..." --json out.json

``DIR`` holds one ``<name>.xml`` per test folder (the package's name, or
``integration_tests``) and, for each, ``<name>.rc`` with the
exit status of its pytest (a folder whose process died on a signal or ran out of time has
no complete XML: it counts as crashed). Exits 1 when a folder failed, crashed or has
errors, so a script can stop on it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# pytest's exit statuses that mean the folder ran to its end (0: all passed, 1: some failed,
# 5: nothing collected); anything else (a signal, a timeout's 124, an internal error) is a crash.
FINISHED = {0, 1, 5}


def folder_result(xml: Path, rc: int | None) -> dict:
    """Counts of one folder's JUnit file, and the reasons its tests were skipped."""
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "seconds": 0.0}
    reasons: Counter[str] = Counter()
    failed: list[str] = []
    if xml.is_file():
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError:
            root = None
        for suite in ([] if root is None else root.iter("testsuite")):
            counts["seconds"] += float(suite.get("time", 0) or 0)
            for case in suite.iter("testcase"):
                counts["tests"] += 1
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                if case.find("failure") is not None:
                    counts["failed"] += 1
                    failed.append(name)
                elif case.find("error") is not None:
                    counts["errors"] += 1
                    failed.append(name)
                elif (skip := case.find("skipped")) is not None:
                    counts["skipped"] += 1
                    reasons[(skip.get("message") or "no reason given").splitlines()[0][:160]] += 1
                else:
                    counts["passed"] += 1
    crashed = rc is None or rc not in FINISHED or not xml.is_file()
    return {**counts, "rc": rc, "crashed": crashed, "failed_tests": failed,
            "skip_reasons": dict(reasons.most_common())}


def commit() -> str:
    """The commit under test: FLAGOS_COMMIT (a copy of the tree has no .git), else git's."""
    if os.environ.get("FLAGOS_COMMIT"):
        return os.environ["FLAGOS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def torch_version() -> str:
    try:
        import torch
    except ImportError:
        return "not installed"
    return torch.__version__


def report(junit_dir: Path, hal: str, command: str, machine: str, benchmark: str = "",
           title: str = "", extra_notes: list[str] | None = None) -> dict:
    folders = {}
    for rc_file in sorted(junit_dir.glob("*.rc")):
        text = rc_file.read_text().strip()
        folders[rc_file.stem] = folder_result(rc_file.with_suffix(".xml"),
                                              int(text) if text.lstrip("-").isdigit() else None)
    rows = []
    for name, r in folders.items():
        state = "crashed" if r["crashed"] else "ok" if not (r["failed"] or r["errors"]) else "failed"
        rows.append([name, r["passed"], r["failed"], r["errors"], r["skipped"], round(r["seconds"], 1),
                     state])
    total = {k: sum(r[k] for r in folders.values()) for k in ("passed", "failed", "errors", "skipped")}
    crashed = [n for n, r in folders.items() if r["crashed"]]
    reasons: Counter[str] = Counter()
    for r in folders.values():
        reasons.update(r["skip_reasons"])
    notes = [f"{total['passed']} passed, {total['failed']} failed, {total['errors']} errors, "
             f"{total['skipped']} skipped; {len(crashed)} folder(s) crashed or ran out of time"
             + (f": {', '.join(crashed)}" if crashed else "") + "."]
    notes += extra_notes or []
    notes += [f"Skipped {n}x: {why}" for why, n in reasons.most_common(12)]
    return {"benchmark": benchmark or f"{hal}-suite",
            "title": title or f"The test suite on the {hal} HAL, one pytest per test folder",
            "machine": machine, "torch": torch_version(), "commit": commit(),
            "command": command,
            "columns": ["folder", "passed", "failed", "errors", "skipped", "seconds", "result"],
            "rows": rows, "notes": notes, "folders": folders}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--junit-dir", type=Path, required=True)
    ap.add_argument("--hal", default=os.environ.get("FLAGOS_HAL", "sim"))
    ap.add_argument("--command", default="tools/gpu_check.sh build native tests")
    ap.add_argument("--machine", default="")
    ap.add_argument("--json", type=Path, help="write the table here")
    ap.add_argument("--benchmark", default="", help="the table's name (default: HAL-suite)")
    ap.add_argument("--title", default="", help="the table's title")
    ap.add_argument("--note", action="append", default=[], help="a note under the table")
    args = ap.parse_args(argv)
    doc = report(args.junit_dir, args.hal, args.command, args.machine, args.benchmark,
                 args.title, args.note)
    for row in doc["rows"]:
        print("  ".join(str(c) for c in row))
    print(doc["notes"][0])
    for name, r in doc["folders"].items():
        for t in r["failed_tests"][:20]:
            print(f"FAILED {name}: {t}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    bad = any(r["crashed"] or r["failed"] or r["errors"] for r in doc["folders"].values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
