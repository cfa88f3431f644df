"""GPU time of the packed weight-only linear kernels, per tile shape, against bf16:

    FLAGOS_HAL=cuda python packages/flagos-quant/benchmarks/packed_kernel_sweep.py \
        [--profile-only] [--json PATH] [--raw-json PATH] [--quick]

For a chip bringing up the Triton kernels of flagos_quant.triton_linear, on the GPU's own
tensors (the kernels' cost is their own, without flagos' dispatch), for FP8 per-tensor,
FP8 128x128-block and NVFP4 weights of Llama-3-8B's decode layers:

1. unless ``--profile-only``: every candidate tile (BLOCK_N, BLOCK_K, num_warps,
   num_stages) of the one-row kernel, timed with triton.testing.do_bench (L2 flushed per
   call), beside the bf16 matmul and the shipped tile; then the one-row kernel against
   the matrix-unit kernel for 1-16 rows (where ``GEMV_MAX_M`` comes from). do_bench
   times of kernels this short include gaps where the host is slower than the GPU, so
   they rank tiles but are not the final numbers;
2. GPU kernel time from torch.profiler (L2 flushed per call, the flush not counted) of
   the shipped tile and of a few others per layer, and of the bf16 matmul: the table
   ``--json`` writes, the numbers the shipped tiles are chosen by.

Compiling hundreds of kernel variants is spread over ``--compile-jobs`` processes first
(Triton's cache then holds them for the timing process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from flagos.bench_results import Plot, Table, write_json
from flagos_quant import triton_linear
from flagos_quant.quantize import quantize_fp8, quantize_fp8_blocks, quantize_nvfp4

# Llama-3-8B decode layers: attention out (4096 x 4096), MLP up (14336 x 4096) and
# MLP down (4096 x 14336).
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
QUICK_SHAPES = [(4096, 4096)]
CANDIDATES = [(bn, bk, w, 2) for bn in (1, 2, 4, 8, 16) for bk in (128, 256, 512, 1024, 2048)
              for w in (2, 4, 8)]  # num_stages made no difference on the H200
FORMATS = ("fp8", "fp8-block128", "nvfp4")


def _weights(fmt: str, n: int, k: int):
    w = torch.randn(n, k, device="cuda") * 0.02
    if fmt == "fp8":
        q, s = quantize_fp8(w)
        return (q, s.reshape(1, 1).float(), [n, k]), q.numel() + 4
    if fmt == "fp8-block128":
        q, s = quantize_fp8_blocks(w, (128, 128))
        return (q, s, [128, 128]), q.numel() + s.numel() * 4
    q, s, g = quantize_nvfp4(w)
    return (q, s, g), q.numel() + s.numel() + 4


def _time_us(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=5, rep=20) * 1e3  # do_bench: ms, L2 flushed per call


def _bf16_us(n: int, k: int, timer) -> float:
    """``timer``'s microseconds of the bf16 matmul of one row with an n x k weight."""
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    return timer(lambda: F.linear(x, w))


class _Layer:
    """One layer's operands and the launcher of one tile shape of its one-row kernel."""

    def __init__(self, fmt: str, n: int, k: int):
        torch.manual_seed(0)
        self.fmt = fmt
        self.x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        self.packed, nbytes = _weights(fmt, n, k)
        self.nbytes = nbytes + k * 2 + n * 2

    def shipped(self) -> torch.Tensor:
        fn = triton_linear.nvfp4_linear if self.fmt == "nvfp4" else triton_linear.fp8_linear
        return fn(self.x, *self.packed, None)

    def launch(self, bn: int, bk: int, warps: int, stages: int) -> torch.Tensor:
        with triton_linear.gemv_tile(bn, bk, warps, stages):
            return self.shipped()


def compile_shard(shapes, candidates, shard: int, jobs: int) -> None:
    """Compile (into Triton's cache) every job-th kernel variant the sweep times, so that
    several processes share the compilation and the timing process finds them built."""
    i = 0
    for n, k in shapes:
        for fmt in FORMATS:
            layer = _Layer(fmt, n, k)
            for c in candidates:
                if i % jobs == shard:
                    try:
                        layer.launch(*c)
                    except Exception:  # noqa: BLE001, S110 - reported when timed
                        pass
                i += 1
    torch.cuda.synchronize()


def sweep(shapes, candidates, json_path: Path | None) -> dict:
    import triton

    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "layers": []}
    for n, k in shapes:
        bf16 = _bf16_us(n, k, _time_us)
        for fmt in FORMATS:
            layer = _Layer(fmt, n, k)
            want = layer.shipped()
            tuned = _time_us(layer.shipped)
            rows = []
            for c in candidates:
                try:
                    err = (layer.launch(*c).float() - want.float()).abs().max().item()
                    us = _time_us(lambda c=c, layer=layer: layer.launch(*c))
                except Exception as e:  # noqa: BLE001 - a shape the compiler refuses
                    rows.append({"config": list(c), "error": str(e)[:200]})
                    continue
                rows.append({"config": list(c), "us": us, "gbps": layer.nbytes / us / 1e3,
                             "max_diff_vs_shipped": err})
            ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
            best = ok[0] if ok else {"config": None, "us": float("nan"), "gbps": 0.0}
            out["layers"].append({"n": n, "k": k, "format": fmt, "bf16_us": bf16,
                                  "shipped_us": tuned, "bytes": layer.nbytes, "best": best,
                                  "top": ok[:10], "failed": [r for r in rows if "error" in r]})
            print(f"{n}x{k} {fmt:13s} bf16 {bf16:7.1f} us | shipped {tuned:7.1f} us "
                  f"({tuned / bf16:.2f}x) | best {best['config']} {best['us']:7.1f} us "
                  f"({best['gbps']:.0f} GB/s, {best['us'] / bf16:.2f}x) | {len(ok)} configs",
                  flush=True)
            if json_path:  # after every layer: a run cut short keeps what it measured
                json_path.write_text(json.dumps(out, indent=1))
    return out


def _kernel_us(fn, calls: int = 30) -> float:
    """Mean GPU time per call of the kernels ``fn`` launches, from torch.profiler's CUDA
    activity, with the L2 cache flushed before each call (the flush itself not counted)."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if "Fill" not in e.key and "fill" not in e.key]
    return sum(e.self_device_time_total for e in events) / calls


def profile_tiles(shapes, tiles) -> list[dict]:
    """GPU kernel time (profiler) of the shipped tile and of ``tiles`` per layer, beside
    the bf16 matmul's: the numbers the shipped tiles are chosen by."""
    res = []
    for n, k in shapes:
        bf16 = _bf16_us(n, k, _kernel_us)
        for fmt in FORMATS:
            layer = _Layer(fmt, n, k)
            row = {"n": n, "k": k, "format": fmt, "bf16_us": bf16,
                   "shipped_us": _kernel_us(layer.shipped), "tiles": {}}
            for t in tiles:
                row["tiles"][str(list(t))] = _kernel_us(lambda t=t, layer=layer: layer.launch(*t))
            best = min(row["tiles"].items(), key=lambda kv: kv[1])
            print(f"[profiler] {n}x{k} {fmt:13s} bf16 {bf16:6.1f} us | shipped "
                  f"{row['shipped_us']:6.1f} us ({row['shipped_us'] / bf16:.2f}x) | best "
                  f"{best[0]} {best[1]:6.1f} us ({best[1] / bf16:.2f}x)", flush=True)
            res.append(row)
    return res


def profile_table(rows: list[dict]) -> Table:
    """The profiler timings of :func:`profile_tiles` as a result table."""
    t = Table("quant-gemv-tiles", "Packed weight-only linear kernels, batch 1: GPU kernel "
              "time of the shipped tile vs bf16 (torch.profiler, L2 flushed per call)",
              ["layer", "weights", "bf16 us", "shipped tile us", "vs bf16", "best tile",
               "best tile us", "best vs bf16"],
              notes=[("bf16 = torch.nn.functional.linear on the same GPU (cuBLAS); shipped "
                      "tile = flagos_quant.triton_linear's fixed tile; best tile = the "
                      f"fastest of {len(PROFILED_TILES)} tiles (BLOCK_N, BLOCK_K, num_warps, "
                      "num_stages)")],
              plot=Plot("bar", x="weights", y=["vs bf16", "best vs bf16"],
                        ylabel="GPU time / bf16", reference=1.0))
    for r in rows:
        best, us = min(r["tiles"].items(), key=lambda kv: kv[1])
        t.add(f"1x{r['k']} @ {r['k']}x{r['n']}", f"{r['format']} {r['n']}x{r['k']}",
              r["bf16_us"], r["shipped_us"], r["shipped_us"] / r["bf16_us"], best, us,
              us / r["bf16_us"])
    return t


PROFILED_TILES = [(1, 1024, 4, 2), (1, 2048, 8, 2), (2, 1024, 4, 2), (2, 2048, 4, 2),
                  (4, 1024, 4, 2), (4, 512, 8, 2), (8, 1024, 4, 2), (8, 1024, 2, 2),
                  (4, 2048, 4, 2), (16, 1024, 8, 2)]


def rows_vs_matmul(shape, ms, tile) -> list[dict]:
    """The one-row kernel (GEMV_MAX_M raised; shipped tile, and ``tile``) against the
    matrix-unit kernel for m rows."""
    n, k = shape
    packed, _ = _weights("fp8", n, k)
    wb = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    res = []
    saved = triton_linear.GEMV_MAX_M
    try:
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t = {}
            for name, limit in (("gemv", m), ("matmul", 0)):
                triton_linear.GEMV_MAX_M = limit
                t[name] = _time_us(lambda x=x: triton_linear.fp8_linear(x, *packed, None))
            triton_linear.GEMV_MAX_M = m
            with triton_linear.gemv_tile(*tile):
                t["gemv_tile"] = _time_us(lambda x=x: triton_linear.fp8_linear(x, *packed, None))
            t["bf16"] = _time_us(lambda x=x: F.linear(x, wb))
            res.append({"m": m, **t})
            print(f"{n}x{k} fp8 m={m:3d}: gemv {t['gemv']:7.1f} us (tile {tile}: "
                  f"{t['gemv_tile']:7.1f} us)  matmul {t['matmul']:7.1f} us  bf16 "
                  f"{t['bf16']:7.1f} us", flush=True)
    finally:
        triton_linear.GEMV_MAX_M = saved
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path,
                    help="write the profiler table as JSON here (flagos.bench_results)")
    ap.add_argument("--raw-json", type=Path,
                    help="write every timing of the tile sweep as JSON here")
    ap.add_argument("--quick", action="store_true", help="one layer, a few tile shapes")
    ap.add_argument("--compile-jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                    help="processes that compile the kernel variants before the timing")
    ap.add_argument("--profile-only", action="store_true",
                    help="only the profiler timing of the shipped and a few other tiles")
    ap.add_argument("--compile-shard", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("packed_kernel_sweep: needs a GPU with a Triton backend "
                         "(the kernels are timed compiled, not interpreted)")
    cands = PROFILED_TILES if args.profile_only else CANDIDATES[::7] if args.quick \
        else CANDIDATES
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.compile_shard is not None:
        compile_shard(shapes, cands, args.compile_shard, args.compile_jobs)
        return
    if args.compile_jobs > 1:
        t0 = time.perf_counter()
        base = [sys.executable, __file__, "--compile-jobs", str(args.compile_jobs)] + \
            (["--quick"] if args.quick else []) + (["--profile-only"] if args.profile_only else [])
        procs = [subprocess.Popen(base + ["--compile-shard", str(i)])
                 for i in range(args.compile_jobs)]
        for p in procs:
            p.wait()
        print(f"compiled in {time.perf_counter() - t0:.0f} s by {args.compile_jobs} processes",
              flush=True)
    if args.profile_only:
        res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    else:
        res = sweep(shapes, cands, args.raw_json)
    res["profiled"] = profile_tiles(shapes, PROFILED_TILES)
    table = profile_table(res["profiled"])
    print(table.format(), flush=True)
    if args.json:
        write_json(args.json, [table])
    if args.profile_only:
        return
    first = res["layers"][0]["best"]["config"] or list(triton_linear.FP8_GEMV_TILE)
    res["rows"] = rows_vs_matmul((4096, 4096), (1, 2, 4, 8, 16), first)
    if args.raw_json:
        args.raw_json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
