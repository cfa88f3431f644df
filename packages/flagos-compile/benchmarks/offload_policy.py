"""Per-inference time of a robot policy net on an edge-chip-like flagos device (the sim
HAL with opaque memory): eager through CPU fallback, offloaded whole to the HAL's graph
runtime (torch.compile with flagos_compile.offload), and native CPU eager.

    python benchmarks/offload_policy.py [--json PATH] [--rounds 5] [--iters 20]

FLAGOS_NO_TWIN=1 is set before flagos loads (unless already set otherwise), so the
sim device behaves as a chip whose memory the host cannot address: eager ops take the
staged CPU-fallback path, as on an edge NPU with no per-op kernels. Variants run in
interleaved rounds; the median of the rounds is kept.
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("FLAGOS_NO_TWIN", "1")

import torch


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
    ap.add_argument("--threads", type=int, default=0,
                    help="torch CPU threads (default: torch's choice); the sim plan runs on one")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import flagos_compile  # noqa: F401 - registers flagos with Dynamo
    from flagos.bench_results import Plot, Table, write_json
    from flagos_compile.models import RobotPolicy
    from flagos_compile.offload import OffloadBackend

    torch.manual_seed(0)
    base = RobotPolicy().eval()
    table = Table(
        "offload_policy",
        ("Robot policy net on sim with opaque memory (FLAGOS_NO_TWIN=1): eager through CPU "
         f"fallback vs whole-graph offload vs native CPU eager, per inference, median of {args.rounds} rounds"),
        ["model", "offloaded regions", "flagos eager via CPU fallback ms", "flagos offloaded ms",
         "native CPU eager ms", "offloaded speedup over eager fallback", "offloaded time / CPU eager"],
        notes=[
            ("torch.no_grad(); eager: every op through flagos' CPU fallback (copy to the host, CPU "
             "kernel, copy back)"),
            ("offloaded: one flagos-sim-plan-v1 graph on the sim stream (the sim HAL's own "
             "single-threaded float32 kernels) plus the compiled wrapper's per-call work"),
            f"native CPU eager: the same model in plain PyTorch on the host ({torch.get_num_threads()} threads)",
        ],
        plot=Plot("bar", "model", ["offloaded speedup over eager fallback"],
                  ylabel="eager-fallback time / offloaded time", reference=1.0))
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
        table.add(f"RobotPolicy b={batch} 64x64", regions, med["eager"], med["offloaded"], med["cpu"],
                  med["eager"] / med["offloaded"], med["offloaded"] / med["cpu"])
    print(table.format())
    if args.json:
        write_json(args.json, [table])
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
