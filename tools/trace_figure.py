"""Draws the Chrome trace of docs/profiling.md's example as a figure for that page.

Runs the example on the sim HAL with opaque memory (``FLAGOS_NO_TWIN=1``; the native
provider serves mm, relu and sum where flagos-ops-native is installed), exports the trace
with ``prof.export_chrome_trace`` and draws what a trace viewer shows of it: the CPU ops
of the Python thread, nested by depth, the flagos stream's row of device spans (routed
ops as a provider ran them, HAL memsets and copies), and an arrow from each CPU op to the
device work it issued (the trace's flow events). The picture comes from the exported
JSON alone, as Perfetto or chrome://tracing would read it.

    python tools/trace_figure.py [--out docs/images/profiler-trace.svg] [--trace PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile

os.environ.setdefault("FLAGOS_HAL", "sim")
os.environ.setdefault("FLAGOS_NO_TWIN", "1")

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def export_trace(path: pathlib.Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(128, 128, device="flagos")
    (x @ x).relu().sum()  # warm: routes resolved, kernels loaded
    torch.flagos.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        (x @ x).relu().sum()
        torch.zeros(4096, device="flagos")
        torch.randn(4096).to("flagos").cpu()
    prof.export_chrome_trace(str(path))


def _depths(ops: list[dict]) -> list[int]:
    """Nesting depth of each CPU op (sorted by start): how many enclosing ops contain it."""
    stack: list[float] = []
    depths = []
    for e in ops:
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        depths.append(len(stack))
        stack.append(e["ts"] + e["dur"])
    return depths


def draw(trace: dict, out: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    cpu = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    device = sorted((e for e in events if e.get("cat") in DEVICE_CATEGORIES), key=lambda e: e["ts"])
    if not cpu or not device:
        raise SystemExit("trace_figure: the trace has no CPU ops or no device spans")
    t0 = min(e["ts"] for e in cpu + device)
    depths = _depths(cpu)
    levels = max(depths) + 1
    row_h, gap = 0.8, 1.4
    device_y = -gap  # the stream's row below the CPU rows
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.55 * (levels + 2)))
    starts: dict[int, tuple[float, float]] = {}
    for e, d in zip(cpu, depths):
        y = levels - 1 - d
        x, w = e["ts"] - t0, e["dur"]
        ax.broken_barh([(x, w)], (y, row_h), facecolors="#9ecae1", edgecolors="#3182bd", lw=0.5)
        if w > 60:
            ax.text(x + 2, y + row_h / 2, e["name"], va="center", fontsize=7, clip_on=True)
        ext = e.get("args", {}).get("External id")
        if ext is not None:
            starts[ext] = (x + w / 2, y)
    colors = {"kernel": "#fdae6b", "gpu_memcpy": "#a1d99b", "gpu_memset": "#bcbddc"}
    for e in device:
        x, w = e["ts"] - t0, max(e["dur"], 1.0)
        ax.broken_barh([(x, w)], (device_y, row_h), facecolors=colors[e["cat"]],
                       edgecolors="#636363", lw=0.5)
        ax.text(x + 2, device_y - 0.25, e["name"], va="top", fontsize=7, rotation=-20,
                clip_on=False)
        src = starts.get(e.get("args", {}).get("External id"))
        if src is not None:
            ax.annotate("", xy=(x, device_y + row_h), xytext=(src[0], src[1]),
                        arrowprops={"arrowstyle": "->", "color": "#de2d26", "lw": 0.7})
    ax.set_yticks([levels - 1 - d + row_h / 2 for d in range(levels)] + [device_y + row_h / 2])
    ax.set_yticklabels([f"CPU thread, depth {d}" for d in range(levels)] + ["flagos:0 stream"])
    ax.set_xlabel("µs since the first event")
    ax.set_ylim(device_y - 2.2, levels + 0.2)
    ax.set_title("torch.profiler trace of the example on sim (opaque memory): CPU ops, the "
                 "flagos stream's device spans, and the flow arrows between them", fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Date": None} if out.suffix == ".svg" else None)
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "images" / "profiler-trace.svg"))
    p.add_argument("--trace", help="draw this exported trace instead of running the example")
    args = p.parse_args()
    if args.trace:
        trace = json.loads(pathlib.Path(args.trace).read_text())
    else:
        with tempfile.TemporaryDirectory() as d:
            path = pathlib.Path(d) / "trace.json"
            export_trace(path)
            trace = json.loads(path.read_text())
    draw(trace, pathlib.Path(args.out))


if __name__ == "__main__":
    main()
