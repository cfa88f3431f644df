"""What the native path costs, on the sim device with opaque memory (FLAGOS_NO_TWIN=1).

1. Host cost per call on small tensors: simk's add kernel called directly (plan + execute
   on the current stream, from C++) against the same call through the flagos dispatcher,
   route and native engine (at::add_out from C++, and torch.add(out=) from Python); the
   difference is what the native path adds.
2. A TinyLlama forward and backward with opaque memory: through the CPU fallback only
   (`default=cpu`: every op copies its inputs to the host and its results back) against
   native + fallback (the shipped routes: simk's kernels, the rest on the fallback).
   On sim the fallback's staged copies are host memcpys and simk's kernels are plain
   single-threaded loops, so this ratio says little about a real chip, where the copies
   cross a bus and the kernels are the vendor's.

    python packages/flagos-ops-native/benchmarks/native_overhead.py [--iters N] [--repeats N]
        [--steps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["FLAGOS_NO_TWIN"] = "1"
os.environ.setdefault("FLAGOS_HAL", "sim")

import flagos
import torch
from flagos.bench_results import Table, write_json
from flagos.models.llama import LlamaConfig, TinyLlama
from flagos_ops_native import _engine, manifest_dir


def per_call(iters: int, repeats: int) -> list[list]:
    """The per-call host costs, each measured `repeats` times interleaved (the machine may
    be loaded by other work; the minimum of each is reported, with the median)."""
    lib = _engine.open_library(str(manifest_dir().parent / "lib" / "libsimk.so"),
                               "simkGetAbiVersion", 1 << 16, 2 << 16, "simkGetLastError")
    a, b = torch.randn(16, device="flagos"), torch.randn(16, device="flagos")
    out = torch.empty(16, device="flagos")
    ca, cb, cout = a.cpu(), b.cpu(), out.cpu()
    times: dict[str, list[float]] = {k: [] for k in ("direct", "engine", "routed", "python")}

    def python_loop() -> float:
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.add(a, b, out=out)
        return (time.perf_counter() - t0) / iters * 1e9

    with flagos.routing.override({"aten::add": ["native"]}):
        for r in range(repeats + 1):  # the first round warms: routes, forms, caches
            runs = {
                "direct": lambda: _engine.time_direct_binary(
                    lib, "simkAddGetWorkspaceSize", "simkAdd", a, b, out, iters),
                "engine": lambda: _engine.time_engine_add_out(a, b, out, iters),
                "routed": lambda: _engine.time_dispatch_add_out(a, b, out, iters),
                "python": python_loop,
            }
            for name, run in runs.items():
                t = run()
                torch.flagos.synchronize()
                if r:
                    times[name].append(t)
        assert flagos.routing.stats()["aten::add.out"]["native"]["calls"] >= iters
    cpu_cpp = _engine.time_dispatch_add_out(ca, cb, cout, iters)
    best = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"host cost per call, add of 16 float32, {iters} calls x {repeats} rounds "
          "(ns, min / median):")
    rows = [
        ["simk kernel called directly (plan + execute)", best["direct"], med["direct"], 0.0],
        ["native engine alone on a boxed add.out", best["engine"], med["engine"],
         best["engine"] - best["direct"]],
        ["at::add_out from C++ through flagos -> native", best["routed"], med["routed"],
         best["routed"] - best["direct"]],
        ["torch.add(out=) from Python through native", best["python"], med["python"],
         best["python"] - best["direct"]],
        ["for scale: at::add_out on CPU tensors", cpu_cpp, cpu_cpp, 0.0],
    ]
    for name, lo, mid, added in rows:
        extra = f"   added over direct: {added:6.0f}" if added else ""
        print(f"  {name:<48} {lo:7.0f} / {mid:7.0f}{extra}")
    return rows


def llama(steps: int) -> list[list]:
    torch.manual_seed(0)
    cfg = LlamaConfig()
    model = TinyLlama(cfg).to("flagos")
    tokens = torch.randint(0, cfg.vocab_size, (4, cfg.max_seq_len + 1), device="flagos")

    def step() -> float:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        model.loss(tokens).backward()
        torch.flagos.synchronize()
        return time.perf_counter() - t0

    times = {}
    for name, spec in (("cpu fallback only", {"default": ["cpu"]}),
                       ("native + fallback", {})):
        with flagos.routing.override(spec):
            step()
            times[name] = min(step() for _ in range(steps))
    print(f"TinyLlama fwd+bwd, {cfg.n_layers} layers dim {cfg.dim}, batch 4x{cfg.max_seq_len}, "
          f"opaque memory, best of {steps} (ms):")
    for name, t in times.items():
        print(f"  {name:<20} {t * 1e3:8.1f}")
    ratio = times["cpu fallback only"] / times["native + fallback"]
    print(f"  speedup of native + fallback over the fallback alone: {ratio:.2f}x "
          "(sim: copies are host memcpys, kernels single-threaded loops)")
    return [[name, t * 1e3] for name, t in times.items()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--json", help="also write the results as benchmark JSON to this path")
    args = p.parse_args()
    calls = per_call(args.iters, args.repeats)
    model = llama(args.steps)
    if args.json:
        per = Table("native_overhead", "native provider on sim: host cost per call (add of "
                    "16 float32, opaque memory)",
                    ["path", "min ns", "median ns", "ns added over direct"],
                    notes=[(f"{args.repeats} interleaved rounds of {args.iters} calls; the "
                           "machine may be loaded, so the minimum is the figure to compare")])
        for name, lo, mid, added in calls:
            per.add(name, round(lo, 1), round(mid, 1), round(added, 1))
        step = Table("native_llama", "TinyLlama fwd+bwd on sim with opaque memory",
                     ["route", "ms"],
                     notes=[("on sim the fallback's copies are host memcpys and simk's kernels "
                            "single-threaded loops: the ratio says little about a real chip")])
        for name, ms in model:
            step.add(name, round(ms, 2))
        write_json(args.json, [per, step])


if __name__ == "__main__":
    main()
