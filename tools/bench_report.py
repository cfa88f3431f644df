#!/usr/bin/env python3
"""Writes docs/benchmarks.md and its plots from the benchmarks' JSON results.

    python tools/bench_report.py [--results docs/bench/results] [--check]

Each folder under ``docs/bench/results`` holds the latest results of one machine (``sim``,
``cuda-nvidia-h200``, ...), one JSON file per benchmark run as ``flagos.bench_results``
writes them (a file with ``tables``, or a single table with its own ``machine`` and
``command``). The page is docs/bench/intro.md, then a summary of the headline measures,
then one section per machine with every table, its command, the commit it was measured at
and its plot (docs/bench/plots/, SVG). The summary table is also written into README.md
between its ``bench-summary`` markers. ``--check`` fails when the files on disk differ
from what would be written (the page is generated, never edited by hand).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGE = DOCS / "benchmarks.md"
INTRO = DOCS / "bench" / "intro.md"
PLOTS = DOCS / "bench" / "plots"
README = ROOT / "README.md"
SUMMARY_BEGIN = "<!-- bench-summary: begin (tools/bench_report.py writes this table) -->"
SUMMARY_END = "<!-- bench-summary: end -->"
MACHINE_ORDER = ("sim",)  # first; the others in name order


def load(results: Path) -> dict[str, list[dict]]:
    """machine folder -> its runs (each with ``tables``), sorted by file name."""
    machines: dict[str, list[dict]] = {}
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        runs = []
        for f in sorted(folder.glob("*.json")):
            data = json.loads(f.read_text())
            if "tables" not in data:  # a single table with its environment
                table = {k: data[k] for k in ("benchmark", "title", "columns", "rows")}
                table.update({k: data[k] for k in ("notes", "plot") if k in data})
                data = {**{k: v for k, v in data.items() if k not in table}, "tables": [table]}
            data["file"] = f.relative_to(ROOT).as_posix()
            runs.append(data)
        if runs:
            machines[folder.name] = runs
    order = [m for m in MACHINE_ORDER if m in machines] + \
        sorted(m for m in machines if m not in MACHINE_ORDER)
    return {m: machines[m] for m in order}


def _fmt(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if math.isnan(v):
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.2f}" if abs(v) >= 10 else f"{v:.3f}"


def markdown_table(columns: list[str], rows: list[list[object]]) -> list[str]:
    numeric = [all(isinstance(r[i], (int, float)) for r in rows) for i in range(len(columns))]
    out = ["| " + " | ".join(columns) + " |",
           "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    out += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in rows]
    return out


def plot(table: dict, machine: str, run: dict, path: Path) -> bool:
    """Draws ``table`` as its ``plot`` says into ``path`` (SVG); False without a plot."""
    spec = table.get("plot")
    if not spec or not table["rows"]:
        return False
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "flagos"  # the same figure writes the same bytes
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: small files
    import matplotlib.pyplot as plt

    cols = table["columns"]
    xi = cols.index(spec["x"])
    ys = [c for c in spec["y"] if c in cols]
    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=100)
    if spec["kind"] == "line":
        xs = [r[xi] for r in table["rows"]]
        for c in ys:
            ax.plot(xs, [r[cols.index(c)] for r in table["rows"]], marker="o", label=c)
        ax.set_xlabel(spec["x"])
    else:
        labels = [str(r[xi]) for r in table["rows"]]
        width = 0.8 / max(1, len(ys))
        for k, c in enumerate(ys):
            # A row without the measure ("-": not measured there) gets no bar.
            vals = [v if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
                    for v in (r[cols.index(c)] for r in table["rows"])]
            ax.bar([i + (k - (len(ys) - 1) / 2) * width for i in range(len(labels))], vals,
                   width, label=c)
        ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 6 else 0,
                      ha="right" if len(labels) > 6 else "center")
    if spec.get("reference") is not None:
        ax.axhline(spec["reference"], color="gray", linewidth=0.8, linestyle="--")
    if spec.get("log_x"):
        ax.set_xscale("log", base=2)
    if spec.get("log_y"):
        ax.set_yscale("log")
    ax.set_ylabel(spec.get("ylabel", ""))
    ax.set_title(f"{table['benchmark']} on {machine} (torch {run.get('torch', '?')}, "
                 f"{run.get('commit', '?')})", fontsize=9)
    if len(ys) > 1:
        ax.legend(fontsize=8)
    ax.grid(axis="y", linewidth=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return True


def _tables(machines: dict[str, list[dict]], benchmark: str):
    for machine, runs in machines.items():
        for run in runs:
            for t in run["tables"]:
                if t["benchmark"] == benchmark:
                    yield machine, t


def _column(t: dict, name: str) -> list[float]:
    if name not in t["columns"]:
        return []
    i = t["columns"].index(name)
    return [r[i] for r in t["rows"] if isinstance(r[i], (int, float))]


def summary(machines: dict[str, list[dict]]) -> list[str]:
    """The headline measures per machine (ratios, and the gems host cost in us): one row
    per measure that a machine has."""
    rows: list[list[object]] = []

    def add(what: str, machine: str, value: float, goal: str, bench: str) -> None:
        rows.append([what, machine, value, goal, f"[{bench}](#{_anchor(machine)})"])

    for machine, t in _tables(machines, "ops"):
        for c in t["columns"]:
            if c.endswith(" ratio") and _column(t, c):
                add(f"small-op latency through {c.removesuffix(' ratio')} (geomean, "
                    "flagos / native)", machine, statistics.geometric_mean(_column(t, c)),
                    "<= 1.1", "ops")
    for bench, what, goal in (
            ("model", "TinyLlama training throughput, flagos / native", ">= 0.98"),
            ("model-no-twin", "TinyLlama training throughput without a twin, flagos / plain CUDA",
             ">= 0.90"),
            ("gems-model", "TinyLlama training throughput, gems route / native CUDA with FlagGems",
             ">= 0.98"),
            ("gems-model-no-twin", ("TinyLlama training throughput without a twin, gems route / "
                                    "native CUDA with FlagGems"), ">= 0.90"),
            ("qwen-image", "Qwen-Image 2.1 denoising step, flagos / native", ">= 0.98"),
            ("qwen-image-no-twin", "Qwen-Image 2.1 denoising step without a twin, flagos / plain CUDA",
             ">= 0.91")):
        for machine, t in _tables(machines, bench):
            for v in _column(t, "throughput ratio"):
                add(what, machine, v, goal, bench)
    for machine, t in _tables(machines, "compile"):
        if _column(t, "ratio"):
            add("torch.compile speedup on flagos / speedup native (geomean)", machine,
                statistics.geometric_mean(_column(t, "ratio")), ">= 0.98", "compile")
    for machine, t in _tables(machines, "gems-host"):
        over = _column(t, "gems - FlagGems us")
        if over:
            add(f"gems route's host cost over FlagGems' own call, max of {len(over)} ops "
                "(us per call)", machine, max(over), "<= 5", "gems-host")
    for machine, t in _tables(machines, "gems-host-no-twin"):
        over = _column(t, "gems - FlagGems us")
        if over:
            add(f"gems without a twin: host cost over FlagGems' own call, max of {len(over)} "
                "ops (us per call)", machine, max(over), "<= 5", "gems-host-no-twin")
        replayed = _column(t, "replayed / native")
        if replayed:
            add(f"gems without a twin, relaunched from C++: host time / native ATen, max of "
                f"{len(replayed)} ops", machine, max(replayed), "<= 1.3", "gems-host-no-twin")
    for machine, t in _tables(machines, "quant-decode-no-twin"):
        for row in (dict(zip(t["columns"], r)) for r in t["rows"]):
            ratio = row.get("vs flagos bf16")
            if not isinstance(ratio, (int, float)):
                continue
            if row.get("case") == "FP8 weight-only, fused":
                add("FP8-weight decode step (batch 1) without a twin / bf16: wall time", machine,
                    ratio, "<= 1", "quant-decode-no-twin")
            elif row.get("case", "").endswith("(no flagos)") and ratio:
                add("bf16 decode step (batch 1) without a twin, flagos / plain CUDA: wall time",
                    machine, 1 / ratio, "<= 1.1", "quant-decode-no-twin")
    for machine, t in _tables(machines, "quant-decode"):
        if machine == "sim":  # a smoke run there: the CPU twin dequantizes, nothing is fused
            continue
        rows_by_name = [dict(zip(t["columns"], r)) for r in t["rows"]]
        for row in (r for r in rows_by_name if r.get("case") == "FP8 weight-only, fused"):
            for col, what in (("vs flagos bf16", "wall time"), ("GPU time vs bf16", "GPU kernel time")):
                if isinstance(row.get(col), (int, float)):
                    add(f"FP8-weight decode step (batch 1), fused emulation / bf16: {what}",
                        machine, row[col], "<= 1", "quant-decode")
    for machine, t in _tables(machines, "quant-graph-decode"):
        if machine == "sim":  # a smoke run there: no GPU kernel time, no plain CUDA
            continue
        for row in (dict(zip(t["columns"], r)) for r in t["rows"]):
            if row.get("device") != "flagos" or not row.get("case", "").endswith("graph"):
                continue
            for col, what, goal in (("wall / GPU kernel time", "wall / GPU kernel time", "<= 1.2"),
                                    ("vs torch.cuda.graph", "flagos / torch.cuda.graph", "<= 1.05")):
                if isinstance(row.get(col), (int, float)):
                    add(f"decode step replayed by torch.flagos.graph ({row['case']}): {what}",
                        machine, row[col], goal, "quant-graph-decode")
    for machine, t in _tables(machines, "allreduce"):
        big = [r[t["columns"].index("ratio")] for r in t["rows"] if r[0] >= (64 << 20)]
        if big:
            add("all_reduce bus bandwidth >= 64 MiB, ProcessGroupFlagOS / NCCL (min)",
                machine, min(big), ">= 0.98", "allreduce")
    if not rows:
        return []
    return markdown_table(["measure", "machine", "value", "goal", "table"], rows)


def _anchor(machine: str) -> str:
    return "results-" + machine


def _describe(run: dict) -> str:
    parts = [str(run.get("machine", "?"))]
    if run.get("hal"):
        parts.append(f"flagos HAL `{run['hal']}`, native reference `{run.get('native') or 'none'}`")
    parts += [f"torch {run.get('torch', '?')}", f"commit `{run.get('commit', '?')}`"]
    return "; ".join(parts)


def page(machines: dict[str, list[dict]], write_plots: bool) -> str:
    lines = [INTRO.read_text().rstrip(), "", "## Summary", ""]
    lines += summary(machines) or ["No results yet: run `nox -s bench`."]
    for machine, runs in machines.items():
        lines += ["", f'<a id="{_anchor(machine)}"></a>', "", f"## Results: {machine}", ""]
        for run in runs:
            for t in run["tables"]:
                lines += [f"### {t['title']}", "",
                          f"`{run.get('command', '?')}` on {_describe(run)}.", ""]
                lines += markdown_table(t["columns"], t["rows"])
                for n in t.get("notes", []):
                    lines += ["", n]
                svg = PLOTS / f"{machine}-{t['benchmark']}.svg"
                if t.get("plot") and t["rows"]:
                    if write_plots:
                        plot(t, machine, run, svg)
                    lines += ["", (f"![{t['benchmark']} on {machine}]"
                                  f"({svg.relative_to(DOCS).as_posix()})")]
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def readme_with(summary_lines: list[str], readme: str) -> str:
    if SUMMARY_BEGIN not in readme or SUMMARY_END not in readme:
        raise SystemExit(f"{README}: the markers {SUMMARY_BEGIN!r} and {SUMMARY_END!r} "
                         "are missing; put them where the summary table belongs")
    head, rest = readme.split(SUMMARY_BEGIN, 1)
    _, tail = rest.split(SUMMARY_END, 1)
    body = [line.replace("](#", "](docs/benchmarks.md#") for line in summary_lines]
    return head + SUMMARY_BEGIN + "\n" + "\n".join(body) + "\n" + SUMMARY_END + tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=DOCS / "bench" / "results")
    ap.add_argument("--check", action="store_true",
                    help="fail when docs/benchmarks.md or README.md's table is out of date")
    args = ap.parse_args(argv)
    machines = load(args.results)
    text = page(machines, write_plots=not args.check)
    readme = readme_with(summary(machines), README.read_text())
    if args.check:
        stale = [p for p, want in ((PAGE, text), (README, readme)) if p.read_text() != want]
        if stale:
            print("out of date (run python tools/bench_report.py): "
                  + ", ".join(str(p.relative_to(ROOT)) for p in stale))
            return 1
        return 0
    PAGE.write_text(text)
    README.write_text(readme)
    print(f"wrote {PAGE.relative_to(ROOT)} ({sum(len(r) for r in machines.values())} runs on "
          f"{len(machines)} machines) and README.md's summary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
