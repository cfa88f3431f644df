"""all_reduce bus bandwidth: ProcessGroupFlagOS (NCCL inside) vs ProcessGroupNCCL, same buffers.

Run on a machine with >= 2 GPUs, CUDA torch, the flagos CUDA HAL and flagos-distributed
installed (no torchrun needed; the script spawns one process per GPU):

    FLAGOS_HAL=cuda python packages/flagos-distributed/benchmarks/allreduce_bw.py \
        --gpus 2 --min-bytes 1M --max-bytes 1G --iters 50 --json allreduce_bw.json

One process group serves both backends ("cpu:gloo,cuda:nccl,flagos:flagos"): each
rank allocates one flagos buffer per size and views the same memory as a CUDA tensor
(flagos_distributed._C._view_as, no copy), so ProcessGroupFlagOS and ProcessGroupNCCL
reduce the very same bytes, interleaved per size (A B B A ...) to cancel drift.
Bus bandwidth as nccl-tests defines it: busbw = 2 (n - 1) / n * bytes / time.
The goal in the flagos-distributed issue: ProcessGroupFlagOS >= 0.98x ProcessGroupNCCL.
Before timing, one all_reduce through each backend is checked (1 -> world -> world**2).
FLAGOS_DIST_TRACE=1 prints each step of ProcessGroupFlagOS's delegation to stderr.
"""

from __future__ import annotations

import argparse
import os
import socket
import time


def _parse_bytes(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def _sizes(lo: int, hi: int) -> list[int]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def _time(fn, sync, iters: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - start) / iters


def _worker(rank: int, args: argparse.Namespace, port: int) -> None:
    import faulthandler

    faulthandler.enable(all_threads=True)  # a crash in a worker prints its Python stack
    os.environ.setdefault("FLAGOS_HAL", "cuda")
    import flagos_distributed as fd
    import torch
    import torch.distributed as dist

    world = args.gpus
    torch.cuda.set_device(rank)
    # the flagos device whose memory is CUDA device `rank`
    idx = next(i for i in range(torch.flagos.device_count())
               if torch.flagos.get_device_properties(i).native_device == "cuda"
               and torch.flagos.get_device_properties(i).native_device_index == rank)
    torch.flagos.set_device(idx)
    os.environ.setdefault("FLAGOS_DIST_BACKEND", "nccl")
    dist.init_process_group("cpu:gloo,cuda:nccl,flagos:flagos",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    flagos_pg = fd.backend_of()
    assert flagos_pg.delegate == "nccl" and flagos_pg.path == "cuda", \
        (flagos_pg.delegate, flagos_pg.path)
    dtype = getattr(torch, args.dtype)
    elem = torch.empty((), dtype=dtype).element_size()

    def sync() -> None:
        torch.flagos.synchronize()
        torch.cuda.synchronize()

    rows = []
    for nbytes in _sizes(args.min_bytes, args.max_bytes):
        n = max(1, nbytes // elem)
        buf = torch.ones(n, dtype=dtype, device=torch.device("flagos", idx))
        view = fd._C._view_as(buf, f"cuda:{rank}")
        assert view.data_ptr() == buf.data_ptr()
        assert view.device == torch.device("cuda", rank), view.device

        def run_flagos(buf=buf):
            dist.all_reduce(buf)

        def run_nccl(view=view):
            dist.all_reduce(view)

        # Both backends reduce the same bytes, and the flagos stream and the CUDA stream are
        # not ordered with each other: sync() whenever the backend changes (two NCCL
        # communicators racing on one buffer is a data race and may deadlock).
        sync()
        if not rows:  # correctness once, on the first size: 1 -> world -> world**2
            run_flagos()
            sync()
            got = float(view[0].item())
            assert got == world, f"ProcessGroupFlagOS all_reduce gave {got}, expected {world}"
            run_nccl()
            sync()
            got = float(view[0].item())
            assert got == world * world, f"ProcessGroupNCCL gave {got}, expected {world ** 2}"
        buf.zero_()  # SUM of zeros stays finite however many repetitions run
        sync()
        for f in (run_flagos, run_nccl):  # warm-up (communicator setup)
            for _ in range(args.warmup):
                f()
            sync()
        t_f, t_n = [], []
        for rep in range(args.reps):
            order = (run_flagos, run_nccl) if rep % 2 == 0 else (run_nccl, run_flagos)
            for f in order:
                t = _time(f, sync, args.iters)
                (t_f if f is run_flagos else t_n).append(t)
        tf, tn = min(t_f), min(t_n)
        factor = 2 * (world - 1) / world
        row = {"bytes": n * elem, "flagos_us": tf * 1e6, "nccl_us": tn * 1e6,
               "flagos_busbw_GBps": factor * n * elem / tf / 1e9,
               "nccl_busbw_GBps": factor * n * elem / tn / 1e9}
        row["ratio"] = row["flagos_busbw_GBps"] / row["nccl_busbw_GBps"]
        rows.append(row)
        del view, buf
    if rank == 0:
        print(f"# all_reduce {args.dtype}, {world} GPUs "
              f"({torch.cuda.get_device_name(0)}), torch {torch.__version__}, "
              f"{args.iters} iters x {args.reps} reps, best rep")
        print("| bytes | ProcessGroupFlagOS us | ProcessGroupNCCL us | "
              "flagos busbw GB/s | NCCL busbw GB/s | ratio |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['bytes']} | {r['flagos_us']:.1f} | {r['nccl_us']:.1f} | "
                  f"{r['flagos_busbw_GBps']:.2f} | {r['nccl_busbw_GBps']:.2f} | "
                  f"{r['ratio']:.3f} |")
        big = [r for r in rows if r["bytes"] >= (64 << 20)] or rows
        print(f"min ratio over sizes >= 64 MiB: {min(r['ratio'] for r in big):.3f}")
        if args.json:
            from flagos.bench_results import Plot, Table, write_json

            table = Table("allreduce", (f"all_reduce bus bandwidth, {args.dtype}, {world} GPUs: "
                                        "ProcessGroupFlagOS (NCCL inside) vs ProcessGroupNCCL "
                                        f"on the same buffers, {args.iters} iterations x "
                                        f"{args.reps} reps, best rep"),
                          ["bytes", "ProcessGroupFlagOS us", "ProcessGroupNCCL us",
                           "flagos busbw GB/s", "NCCL busbw GB/s", "ratio"],
                          plot=Plot("line", "bytes", ["flagos busbw GB/s", "NCCL busbw GB/s"],
                                    ylabel="bus bandwidth GB/s", log_x=True))
            for r in rows:
                table.add(r["bytes"], r["flagos_us"], r["nccl_us"], r["flagos_busbw_GBps"],
                          r["nccl_busbw_GBps"], r["ratio"])
            table.notes.append(f"min ratio over sizes >= 64 MiB: "
                               f"{min(r['ratio'] for r in big):.3f}")
            write_json(args.json, [table])
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--min-bytes", type=_parse_bytes, default=_parse_bytes("1M"))
    p.add_argument("--max-bytes", type=_parse_bytes, default=_parse_bytes("1G"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--json", default="")
    args = p.parse_args()
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(args, port), nprocs=args.gpus, join=True)


if __name__ == "__main__":
    main()
