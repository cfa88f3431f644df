"""Per-inference time of a robot policy net on an edge-chip-like flagos device (the sim
HAL with opaque memory): eager through CPU fallback, offloaded whole to the HAL's graph
runtime (torch.compile with flagos_compile.offload), and native CPU eager.

    python benchmarks/offload_policy.py [--json PATH] [--rounds 5] [--iters 20]

FLAGOS_NO_HOST_ALIAS=1 is set before flagos loads (unless already set otherwise), so the
sim device behaves as a chip whose memory the host cannot address: eager ops take the
staged CPU-fallback path, as on an edge NPU with no per-op kernels. Variants run in
interleaved rounds; the median of the rounds is kept.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("FLAGOS_NO_HOST_ALIAS", "1")

import torch


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def per_call(fn, sync, iters: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the results as JSON to this path")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    args = ap.parse_args()

    import flagos_compile  # noqa: F401 - registers flagos with Dynamo
    from flagos_compile.models import RobotPolicy
    from flagos_compile.offload import OffloadBackend

    torch.manual_seed(0)
    base = RobotPolicy().eval()
    rows = []
    cache = tempfile.mkdtemp(prefix="flagos_offload_bench_")
    for batch in [int(b) for b in args.batches.split(",")]:
        image, state = torch.randn(batch, 3, 64, 64), torch.randn(batch, 8)
        dev = copy.deepcopy(base).to("flagos")
        dinputs = [image.to("flagos"), state.to("flagos")]
        backend = OffloadBackend(cache_dir=cache, strict=True)
        torch._dynamo.reset()
        compiled = torch.compile(dev, backend=backend)
        with torch.no_grad():
            want = base(image, state)
            torch.testing.assert_close(compiled(*dinputs).cpu(), want, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(dev(*dinputs).cpu(), want, atol=1e-4, rtol=1e-4)
        regions = sum(r.offloaded for r in backend.reports[-1].regions)
        variants = {
            "eager": (functools.partial(dev, *dinputs), torch.flagos.synchronize),
            "offloaded": (functools.partial(compiled, *dinputs), torch.flagos.synchronize),
            "cpu": (functools.partial(base, image, state), lambda: None),
        }
        times = {k: [] for k in variants}
        with torch.no_grad():
            for fn, sync in variants.values():
                per_call(fn, sync, 2)  # warm up
            for _ in range(args.rounds):
                for k, (fn, sync) in variants.items():
                    times[k].append(per_call(fn, sync, args.iters))
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rows.append([f"RobotPolicy b={batch} 64x64", regions, round(med["eager"], 3), round(med["offloaded"], 3),
                     round(med["cpu"], 3), round(med["eager"] / med["offloaded"], 2),
                     round(med["offloaded"] / med["cpu"], 2)])
    columns = ["model", "offloaded regions", "flagos eager via CPU fallback (ms)", "flagos offloaded (ms)",
               "native CPU eager (ms)", "offloaded speedup over eager fallback", "offloaded time / CPU eager"]
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
    print("  ".join(str(c).ljust(w) for c, w in zip(columns, widths)))
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    if args.json:
        result = {
            "benchmark": "offload_policy",
            "title": "Robot policy net on sim with opaque memory: eager CPU fallback vs whole-graph offload vs CPU",
            "machine": _cpu_name(),
            "torch": torch.__version__,
            "commit": _commit(),
            "command": "python packages/flagos-compile/benchmarks/offload_policy.py --json offload_policy.json",
            "columns": columns,
            "rows": rows,
            "notes": [
                "Per-inference time, median of interleaved rounds, torch.no_grad(), FLAGOS_NO_HOST_ALIAS=1.",
                "Eager: every op through flagos' CPU fallback (device-to-host copy, CPU kernel, copy back).",
                ("Offloaded: one flagos-sim-plan-v1 graph on the sim stream (the sim HAL's own single-threaded "
                 "float32 kernels), plus the compiled wrapper's per-call work."),
                "CPU eager: the same model in plain PyTorch on the host CPU (oneDNN/MKL kernels, all cores).",
            ],
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
