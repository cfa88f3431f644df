"""Writing a tuner's choices as an ordinary routing file.

One ``[hal.<name>.ops]`` table (the tuned device's HAL) with an entry per whole op, and
above each entry, as comments, what was measured: every provider's workload-weighted time
and spread, or why it was not eligible, and notes (noise, shape-dependent winners). Load it
with ``FLAGOS_ROUTES_FILE=<file>`` or ``flagos.routing.load(<file>)``.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .tuner import OpChoice, TuneResult

__all__ = ["format_routes", "write_routes"]


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _comment(text: str) -> str:
    return " ".join(text.split())[:200]


def _op_block(c: OpChoice) -> list[str]:
    n = sum(r.call.count for r in c.calls)
    lines = [(f"# {c.op}: {n} call(s), {len(c.calls)} distinct; times are the workload's "
              f"total (sum of count x median per call)")]
    for p in sorted(c.totals, key=lambda p: c.totals[p][0]):
        total, spread = c.totals[p]
        mark = "   <- chosen" if p == c.chosen else ""
        lines.append(f"#   {p:<10} {total:10.1f} us  (spread {spread:.1f}){mark}")
    for p in sorted({p for r in c.calls for p in r.runs} - set(c.totals)):
        call = next(r for r in c.calls if r.runs[p].status != "ok")
        bad = call.runs[p]
        detail = f": {bad.detail}" if bad.detail else ""
        lines.append(f"#   {p:<10} {bad.status} on {call.call.signature()}{_comment(detail)}")
    if c.baseline and c.baseline != c.chosen:
        lines.append(f"#   (before tuning: {c.baseline})")
    lines += [f"#   note: {_comment(note)}" for note in c.notes]
    chain = ", ".join(_quote(p) for p in c.chain)
    lines.append(f"{_quote(c.op)} = [{chain}]")
    return lines


def format_routes(result: TuneResult) -> str:
    """The routing file's text."""
    s = result.settings
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# flagos routing file written by `python -m flagos tune`",
        (f"# {when}; flagos:{result.device} ({result.device_name}, HAL {result.hal}); "
         f"torch {torch.__version__}"),
        (f"# workload: {result.workload} ({len(result.choices)} ops); providers measured: "
         f"{', '.join(s['providers'])}"),
        (f"# timing: HAL events, {s['warmup']} warm-up and {s['reps']} timed batches per call "
         f"(about {s['target_ms']} ms each), median per call; a provider replaces the one the "
         f"routes chose before only when faster by more than both spreads and {s['margin']:.0%}"),
        f"# correctness: results against torch's CPU kernels, dtype tolerances x{s['tolerance']}",
        *[f"# not measured: {p}: {_comment(why)}" for p, why in s.get("unavailable", {}).items()],
        "# Load with FLAGOS_ROUTES_FILE=<this file> or flagos.routing.load(<this file>).",
        "",
        f"[hal.{result.hal}.ops]",
    ]
    for c in result.choices:
        out += _op_block(c) + [""]
    return "\n".join(out).rstrip() + "\n"


def write_routes(result: TuneResult, path: str | os.PathLike[str]) -> Path:
    """Write the routing file and check that it loads (a RoutingConfigError names the line
    when it does not); returns the path."""
    from flagos.routing.config import load_file
    from flagos.routing.table import vocabulary

    p = Path(path)
    p.write_text(format_routes(result))
    load_file(p, vocabulary())
    return p
