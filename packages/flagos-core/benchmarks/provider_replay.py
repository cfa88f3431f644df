"""What relaunching a Python provider's calls from C++ saves, on the sim device.

A Python provider whose op is one kernel launch through the HAL (sim's axpy kernel, built
from the tests' source with the system C compiler), declared replayable
(``Provider.replayable_ops``): the host cost per call through Python (the launch cache
off) against the same calls relaunched from C++ (its default), with the launch alone
from Python and an ATen op through boxing for scale. The kernel's own time is a loop
over 256 floats on the stream's worker; calls are queued, and the stream is synchronized
after each round only.

    python packages/flagos-core/benchmarks/provider_replay.py [--iters N] [--repeats N]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import tempfile
import time

os.environ.setdefault("FLAGOS_HAL", "sim")

import flagos
import flagos.routing
import torch
from flagos import kernels, launch_cache
from flagos.bench_results import Table, write_json

N = 256
BLOCK = 64
SOURCE = pathlib.Path(__file__).resolve().parents[1] / "tests" / "sim_kernels" / "axpy.c"


def _axpy_kernel() -> kernels.Kernel:
    import flagos_hal

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("provider_replay: no C compiler to build the sim kernel library")
    with tempfile.TemporaryDirectory() as d:
        lib = pathlib.Path(d) / "libaxpy.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
                        f"-I{flagos_hal.get_include()}", str(SOURCE), "-o", str(lib)], check=True)
        image = lib.read_bytes()
    module = kernels.KernelModule(0, "flagos-sim-kernels-v1", image)
    return module.kernel("axpy", ("*fp32", "*fp32", "*fp32", "fp32", "i64"))


class _Axpy(flagos.routing.Provider):
    name = "bench_replayed_axpy"
    replayable_ops = frozenset({"flagos_bench_replay::axpy"})

    def __init__(self, kernel: kernels.Kernel) -> None:
        super().__init__()
        self.kernel = kernel

    def serves(self, op: str) -> bool:
        return op in self.replayable_ops

    def __call__(self, op, args, kwargs):
        x, y, alpha = args
        out = torch.empty_like(x)
        self.kernel.launch((-(-x.numel() // BLOCK),), (BLOCK,), x, y, out, alpha, x.numel())
        return out


def per_call(iters: int, repeats: int) -> list[list]:
    kernel = _axpy_kernel()
    lib = torch.library.Library("flagos_bench_replay", "DEF")
    lib.define("axpy(Tensor x, Tensor y, float alpha) -> Tensor")
    flagos.routing.register_provider(_Axpy(kernel))
    op = torch.ops.flagos_bench_replay.axpy
    x, y = torch.randn(N, device="flagos"), torch.randn(N, device="flagos")
    out = torch.empty_like(x)

    def loop(call) -> float:
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        t = (time.perf_counter() - t0) / iters * 1e9
        torch.flagos.synchronize()
        return t

    def through_python() -> float:
        with launch_cache.disabled():
            return loop(lambda: op(x, y, 0.5))

    runs = {
        "python": through_python,
        "replayed": lambda: loop(lambda: op(x, y, 0.5)),
        "launch": lambda: loop(lambda: kernel.launch((N // BLOCK,), (BLOCK,), x, y, out, 0.5, N)),
        "boxing": lambda: loop(lambda: torch.add(y, x, alpha=0.5)),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    before = launch_cache.stats()
    with flagos.routing.override({"flagos_bench_replay::axpy": [_Axpy.name]}):
        for r in range(repeats + 1):  # the first round warms: routes, the kept launch
            for name, run in runs.items():
                t = run()
                if r:
                    times[name].append(t)
        torch.testing.assert_close(op(x, y, 0.5).cpu(), (0.5 * x + y).cpu())
    relaunched = launch_cache.stats()["relaunched"] - before["relaunched"]
    assert relaunched >= iters * repeats, relaunched  # the replayed rounds ran from C++
    best = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = [
        ["Python provider, launch through flagos.kernels (launch cache off)", best["python"],
         med["python"], 1.0],
        ["the same calls relaunched from C++ (replayable_ops)", best["replayed"],
         med["replayed"], best["python"] / best["replayed"]],
        ["for scale: the launch alone from Python (flagos.kernels)", best["launch"],
         med["launch"], best["python"] / best["launch"]],
        ["for scale: torch.add through boxing (CPU twin)", best["boxing"], med["boxing"],
         best["python"] / best["boxing"]],
    ]
    print(f"host cost per call, axpy of {N} float32 on sim, {iters} calls x {repeats} rounds "
          "(ns, min / median, Python path / this):")
    for name, lo, mid, ratio in rows:
        print(f"  {name:<70} {lo:8.0f} / {mid:8.0f}   {ratio:5.2f}x")
    lib._destroy()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", help="also write the results as benchmark JSON to this path")
    args = p.parse_args()
    rows = per_call(args.iters, args.repeats)
    if args.json:
        t = Table("provider_replay", f"Python provider relaunched from C++ on sim: host cost "
                  f"per call (one axpy launch of {N} float32)",
                  ["path", "min ns", "median ns", "Python path / this"],
                  notes=[(f"{args.repeats} interleaved rounds of {args.iters} calls; the "
                          "machine may be loaded, so the minimum is the figure to compare")])
        for name, lo, mid, ratio in rows:
            t.add(name, round(lo, 1), round(mid, 1), round(ratio, 3))
        write_json(args.json, [t])


if __name__ == "__main__":
    main()
