"""FlagGems through flagos (route ``gems``) against FlagGems itself and native ATen, on a
CUDA HAL, measured side by side in one run.

    python packages/flagos-ops-gems/benchmarks/gems_bench.py [--only host,model] [--quick]
        [--rounds N] [--ops add,mm] [--json PATH]

``host``: host microseconds per call of small hot ops (GPU work negligible, so the time is
what the host spends per call), each timed four ways in alternating rounds:

- ``native``: the op on CUDA tensors, ATen's own kernel;
- ``FlagGems``: the op on CUDA tensors inside ``flag_gems.use_gems()`` (FlagGems
  registered on the CUDA key, as ``flag_gems.enable()`` does);
- ``gems``: the op on flagos tensors routed to ``gems`` (FlagGems' kernels on zero-copy
  CUDA aliases);
- ``boxing``: the op on flagos tensors routed to ``boxing`` (ATen's CUDA kernel).

``gems - FlagGems`` is what flagos adds per call. Without a twin (``FLAGOS_NO_TWIN=1`` on
the cuda HAL, standing in for a chip without CUDA) ``gems`` runs FlagGems on the flagos
tensors themselves, launched through the HAL; FlagGems on CUDA tensors is then timed in a
clean process beside (FlagGems serves one device type per process), a round at a time
between this process's rounds, boxing is absent, and the table is ``gems-host-no-twin``. The providers that served each op are
printed from ``flagos.routing.stats()`` (an op that FlagGems does not serve as such, e.g.
one that decomposes above flagos, shows which ops gems served instead).

``--profile OP[,OP]``: instead, cProfile's top functions for 2000 calls of each named
host op, through the gems route and with FlagGems on CUDA tensors (where the difference
between the two is spent).

``model``: a bf16 TinyLlama training step (forward + backward) on flagos with the gems
routing file against native CUDA with ``flag_gems.enable()`` (timed in a clean process
without flagos, see flagos.models.clean_process), throughput ratio native time / flagos time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import flagos
import torch
import torch.nn.functional as F
from flagos.bench import native_reference, run_sections, timeit
from flagos.bench_results import Plot, Table, write_json


def _ops(dev: torch.device) -> dict[str, tuple[Callable[..., object], tuple]]:
    """name -> (fn, args on `dev`); small shapes so that the host cost dominates."""
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype).to(dev)

    a, b = r(64, 64), r(64, 64)
    w, bias = r(64), r(64)
    table = r(1000, 64)
    idx = torch.randint(0, 1000, (32,), generator=g).to(dev)
    return {
        "add": (torch.add, (a, b)),
        "mul": (torch.mul, (a, b)),
        "mm": (torch.mm, (a, b)),
        "softmax": (lambda x: torch.softmax(x, -1), (a,)),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (64,), w, b), (a, w, bias)),
        "rms_norm": (lambda x, w: F.rms_norm(x, (64,), w), (a, w)),
        "sum": (torch.sum, (a,)),
        "embedding": (F.embedding, (idx, table)),
        "silu": (F.silu, (a,)),
        "gelu": (F.gelu, (a,)),
    }


def _served(name: str, fn, args) -> str:
    flagos.routing.reset_stats()
    fn(*args)
    torch.flagos.synchronize()
    parts = []
    for op, per in sorted(flagos.routing.stats().items()):
        for prov, st in per.items():
            if st["calls"]:
                parts.append(f"{op.removeprefix('aten::')}={prov}")
    return ", ".join(parts) or "no routed op"


def bench_host(min_time: float, rounds: int, only: list[str] | None = None) -> Table:
    import flag_gems

    cuda = flagos.twin_device(0)
    fl = torch.device("flagos", 0)
    native_ops, flagos_ops = _ops(cuda), _ops(fl)
    table = Table("gems-host", (f"gems: host us per call, FlagGems {flag_gems.__version__} "
                                f"(min of {rounds} rounds): native ATen, FlagGems on CUDA "
                                "tensors, FlagGems through flagos' gems route, boxing"),
                  ["op", "native us", "FlagGems us", "gems us", "boxing us",
                   "gems - FlagGems us", "served through flagos (gems route)"],
                  plot=Plot("bar", "op", ["gems - FlagGems us"],
                            ylabel="us flagos adds over FlagGems per call"))
    unknown = sorted(set(only or ()) - set(native_ops))
    if unknown:
        raise SystemExit(f"gems_bench: no host op {', '.join(unknown)}; the ops are "
                         f"{', '.join(native_ops)}")
    for name, (fn, args_n) in native_ops.items():
        if only and name not in only:
            continue
        args_f = flagos_ops[name][1]
        t = {"native": [], "FlagGems": [], "gems": [], "boxing": []}
        for _ in range(rounds):
            t["native"].append(timeit(fn, cuda, min_time, args=args_n))
            with flag_gems.use_gems():
                t["FlagGems"].append(timeit(fn, cuda, min_time, args=args_n))
            for route, chain in (("gems", ["gems", "boxing", "cpu"]), ("boxing", ["boxing", "cpu"])):
                with flagos.routing.override({"default": chain}):
                    t[route].append(timeit(fn, fl, min_time, args=args_f))
        best = {k: min(v) * 1e6 for k, v in t.items()}
        with flagos.routing.override({"default": ["gems", "boxing", "cpu"]}):
            served = _served(name, fn, args_f)
        table.add(name, best["native"], best["FlagGems"], best["gems"], best["boxing"],
                  best["gems"] - best["FlagGems"], served)
        print(f"  {name}: {table.rows[-1][1:6]}", flush=True)
    return table


def _no_twin() -> bool:
    """flagos devices without a twin on a machine whose CUDA runs FlagGems natively."""
    return flagos.get_device_properties(0).twin_device == "none" and torch.cuda.is_available()


def serve_flaggems_cuda_host(min_time: float, stdin=sys.stdin, stdout=sys.stdout) -> None:
    """The clean process of ``bench_host_no_twin``: for each op name read from ``stdin``,
    one round of host seconds per call on CUDA tensors with FlagGems (``use_gems``),
    written to ``stdout`` as a JSON line; an empty line or the end of input ends it."""
    import flag_gems

    cuda = torch.device("cuda", 0)
    ops = _ops(cuda)
    for line in stdin:
        name = line.strip()
        if not name:
            break
        fn, args = ops[name]
        with flag_gems.use_gems():
            seconds = timeit(fn, cuda, min_time, args=args)
        stdout.write(json.dumps({"op": name, "seconds": seconds}) + "\n")
        stdout.flush()


class FlagGemsCudaProcess:
    """``serve_flaggems_cuda_host`` in a clean process beside this one, asked for one round
    at a time so that its rounds alternate with this process's (both see the machine in
    the same state)."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env)

    def time(self, name: str) -> float:
        """Host seconds per call of op ``name`` (one round) in the clean process."""
        self.child.stdin.write(name + "\n")
        self.child.stdin.flush()
        for line in self.child.stdout:  # lines a library prints to stdout are passed over
            with contextlib.suppress(ValueError):
                reply = json.loads(line)
                if isinstance(reply, dict) and reply.get("op") == name:
                    return reply["seconds"]
        raise SystemExit("gems_bench: FlagGems on CUDA tensors failed:\n"
                         f"{self.child.stderr.read()[-3000:]}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.child.stdin.write("\n")
            self.child.stdin.close()
        self.child.wait(timeout=60)


def bench_host_no_twin(min_time: float, rounds: int, only: list[str] | None = None) -> Table:
    """The host table without a twin: native ATen on CUDA and gems on flagos tensors here,
    FlagGems on CUDA tensors in a clean process beside, the three in alternating rounds."""
    cuda = native_reference(0)  # the twin, or without one the GPU the HAL drives
    fl = torch.device("flagos", 0)
    native_ops, flagos_ops = _ops(cuda), _ops(fl)
    unknown = sorted(set(only or ()) - set(native_ops))
    if unknown:
        raise SystemExit(f"gems_bench: no host op {', '.join(unknown)}; the ops are "
                         f"{', '.join(native_ops)}")
    env = {k: v for k, v in os.environ.items() if k != "FLAGOS_NO_TWIN"}
    env["CUDA_VISIBLE_DEVICES"] = str(cuda.index)
    clean = FlagGemsCudaProcess([sys.executable, os.path.abspath(__file__),
                                 "--flaggems-cuda-host", "--min-time", str(min_time)], env)
    try:
        return _host_no_twin_table(min_time, rounds, only, cuda, fl, native_ops, flagos_ops,
                                   clean)
    finally:
        clean.close()


def _host_no_twin_table(min_time: float, rounds: int, only: list[str] | None,
                        cuda: torch.device, fl: torch.device, native_ops: dict,
                        flagos_ops: dict, clean: FlagGemsCudaProcess) -> Table:
    import flag_gems
    from flagos import launch_cache

    table = Table("gems-host-no-twin", (
        f"gems without a twin: host us per call, FlagGems {flag_gems.__version__} (min of "
        f"{rounds} alternating rounds): native ATen, FlagGems on CUDA tensors (a clean "
        "process beside, its rounds between this one's), FlagGems "
        "on flagos tensors through the HAL (FLAGOS_NO_TWIN=1, gems route) with its Python "
        "wrapper at every call, and relaunched from C++ where the op is admitted "
        "(replayable.toml)"),
        ["op", "native us", "FlagGems us", "gems us", "gems - FlagGems us", "replayed us",
         "replayed / native", "served through flagos (gems route)"],
        plot=Plot("bar", "op", ["gems - FlagGems us"],
                  ylabel="us flagos adds over FlagGems per call"))
    chain = {"default": ["gems", "cpu"]}
    not_replayed = []
    for name, (fn, args_n) in native_ops.items():
        if only and name not in only:
            continue
        args_f = flagos_ops[name][1]
        t = {"native": [], "flaggems": [], "gems": [], "replayed": []}
        relaunched = 0
        for _ in range(rounds):
            t["native"].append(timeit(fn, cuda, min_time, args=args_n))
            t["flaggems"].append(clean.time(name))
            with flagos.routing.override(chain):
                with launch_cache.disabled():
                    t["gems"].append(timeit(fn, fl, min_time, args=args_f))
                before = launch_cache.stats()["relaunched"]
                t["replayed"].append(timeit(fn, fl, min_time, args=args_f))
                relaunched += launch_cache.stats()["relaunched"] - before
        best = {k: min(v) * 1e6 for k, v in t.items()}
        with flagos.routing.override(chain):
            served = _served(name, fn, args_f)
        replayed = best["replayed"] if relaunched else ""
        if not relaunched:
            not_replayed.append(name)
        table.add(name, best["native"], best["flaggems"], best["gems"],
                  best["gems"] - best["flaggems"], replayed,
                  replayed / best["native"] if relaunched else "", served)
        print(f"  {name}: {table.rows[-1][1:7]}", flush=True)
    if not_replayed:
        table.notes.append("not relaunched (not admitted, or its calls are not kept): " +
                           ", ".join(not_replayed))
    return table


def profile_host(names: list[str], calls: int = 2000, top: int = 18) -> None:
    """Prints cProfile's top functions (by own time) of ``calls`` calls of each op: through
    the gems route on flagos tensors, and with FlagGems on CUDA tensors."""
    import cProfile
    import pstats

    import flag_gems

    cuda, fl = flagos.twin_device(0), torch.device("flagos", 0)
    native_ops, flagos_ops = _ops(cuda), _ops(fl)
    for name in names:
        fn, args_n = native_ops[name]
        args_f = flagos_ops[name][1]
        with flagos.routing.override({"default": ["gems", "boxing", "cpu"]}):
            sides = [("gems route", fl, args_f, None)]
            sides.append(("FlagGems on CUDA", cuda, args_n, flag_gems.use_gems))
            for label, dev, args, ctx in sides:
                with ctx() if ctx else contextlib.nullcontext():
                    fn(*args)
                    timeit(fn, dev, 0.05, args=args)  # warm
                    prof = cProfile.Profile()
                    prof.enable()
                    for _ in range(calls):
                        fn(*args)
                    prof.disable()
                print(f"\n== {name}, {label}: {calls} calls, by own time", flush=True)
                pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def bench_model(quick: bool) -> Table:
    from flagos.models import LlamaConfig, TinyLlama
    from flagos.models.clean_process import CleanProcessTimer, time_steps

    no_twin = _no_twin()
    cuda = native_reference(0)  # the twin, or without one the GPU the HAL drives
    fl = torch.device("flagos", 0)
    cfg = LlamaConfig(dim=1024 if quick else 2048, n_layers=4 if quick else 8,
                      n_heads=16, hidden_dim=2816 if quick else 5632,
                      max_seq_len=1025, vocab_size=32000)
    batch, seq, steps = (4, 512, 5) if quick else (8, 1024, 10)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1))
    torch.manual_seed(1)
    model = TinyLlama(cfg).to(device=fl, dtype=dtype)
    fl_tokens = tokens.to(fl)
    where = ("flagos without a twin (FLAGOS_NO_TWIN=1) with the gems routing file" if no_twin
             else "flagos with the gems routing file")
    table = Table("gems-model-no-twin" if no_twin else "gems-model",
                  (f"gems: TinyLlama {cfg.n_layers}x{cfg.dim} bf16 forward+backward, batch "
                   f"{batch}x{seq}; {where} vs native CUDA with flag_gems.enable() (clean "
                   "process)"),
                  ["model", "flagos-gems tok/s", "cuda+FlagGems tok/s", "throughput ratio"],
                  plot=Plot("bar", "model", ["throughput ratio"],
                            ylabel="flagos / native throughput", reference=1.0))
    timer = CleanProcessTimer(dataclasses.asdict(cfg), str(cuda), dtype, batch, seq, seed=1,
                              setup="flag_gems:enable")
    results: dict[str, float] = {}
    rounds: dict[str, list[float]] = {}
    flagos.routing.reset_stats()
    try:
        flagos.routing.load("gems")
        sides = {"flagos-gems": lambda w, n: time_steps(model, fl_tokens,
                                                        torch.flagos.synchronize, w, n),
                 "cuda+FlagGems": timer}
        # The first step apart: it compiles (or reads from the caches) every Triton
        # kernel and pays FlagGems' autotuning where its cache has no entry.
        t0 = time.perf_counter()
        sides["flagos-gems"](0, 1)
        first = time.perf_counter() - t0
        print(f"  first step flagos-gems: {first:.1f} s", flush=True)
        for rnd in range(2):
            for name, run in sides.items():
                t0 = time.perf_counter()
                s = run(2 if rnd == 0 else 0, steps)
                results[name] = min(results.get(name, s), s)
                rounds.setdefault(name, []).append(s)
                print(f"  round {rnd} {name}: {s * 1e3:.1f} ms/step "
                      f"({time.perf_counter() - t0:.0f}s)", flush=True)
    finally:
        timer.close()
        flagos.routing.reset()
    from flagos_ops_gems.warm import calls_by_provider

    used, on_cpu = calls_by_provider(flagos.routing.stats())
    f, c = results["flagos-gems"], results["cuda+FlagGems"]
    tok = batch * seq
    table.add(f"TinyLlama {cfg.n_layers}x{cfg.dim}", tok / f, tok / c, c / f)
    table.notes.append("flagos ops by provider: " +
                       ", ".join(f"{p} {n}" for p, n in sorted(used.items())))
    if on_cpu:
        table.notes.append("ops on the CPU fallback (calls): " + ", ".join(
            f"{op} {n}" for op, n in sorted(on_cpu.items(), key=lambda kv: -kv[1])))
    table.notes.append(f"first flagos-gems step (compiling, or reading the kernel caches): "
                       f"{first:.1f} s")
    table.notes.append("rounds: " + "; ".join(
        f"{name} {', '.join(f'{s * 1e3:.1f}' for s in times)} ms/step"
        for name, times in rounds.items()) + f" ({steps} steps per round, the best kept)")
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", default="host,model")
    p.add_argument("--quick", action="store_true", help="shorter timings, smaller model")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default="", help="also write the tables here (JSON)")
    p.add_argument("--profile", default="", help="host ops to profile instead (see above)")
    p.add_argument("--ops", default="", help="time only these host ops (comma-separated)")
    p.add_argument("--min-time", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--flaggems-cuda-host", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    only = [o for o in args.ops.split(",") if o] or None
    min_time = args.min_time or (0.05 if args.quick else 0.2)
    if args.flaggems_cuda_host:  # the clean process of bench_host_no_twin
        serve_flaggems_cuda_host(min_time)
        return 0
    no_twin = flagos.device_count() > 0 and _no_twin()
    if flagos.device_count() == 0 or (flagos.get_device_properties(0).twin_device != "cuda"
                                      and not no_twin):
        print("gems_bench: needs a flagos device on a CUDA HAL (FLAGOS_HAL=cuda), with its "
              "CUDA twin or without a twin (FLAGOS_NO_TWIN=1)")
        return 0
    from flagos_ops_gems import gems_unavailable

    why = gems_unavailable()
    if why:
        print(f"gems_bench: the gems provider cannot run here: {why}")
        return 0
    print(f"# gems bench: torch {torch.__version__}, flagos:0 = {flagos.get_device_name(0)}",
          flush=True)
    if args.profile:
        profile_host(args.profile.split(","))
        return 0
    host = bench_host_no_twin if no_twin else bench_host
    sections = {"host": lambda: host(min_time, args.rounds, only),
                "model": lambda: bench_model(args.quick)}
    tables = run_sections(sections, args.only)
    if args.json:
        write_json(args.json, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
