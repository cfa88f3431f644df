"""Benchmarks: flagos against native PyTorch, measured side by side in one run.

    python -m flagos.bench [--quick] [--only NAME[,NAME]] [--json out.json]

Sections: ``alloc`` (allocator malloc/free throughput vs the native allocator), ``copy``
(``tensor.to("flagos")`` / ``.cpu()`` bandwidth vs a native copy of the same bytes),
``ops`` (per-op latency of small ops through each route vs the same op on native
tensors), ``model`` (training throughput of a transformer stack vs native). The native
reference is the HAL's twin device: CPU for sim, CUDA for the cuda HAL; without a twin
(``FLAGOS_NO_TWIN=1``) the device the HAL names as addressing its memory (the same GPU on
the cuda HAL) through plain PyTorch, with flagos on the routes in force (``FLAGOS_ROUTES_FILE=gems``: FlagGems through the HAL). Ratios are
flagos time / native time (lower is better; 1.0 is parity), except bandwidth and
throughput ratios, which are flagos / native (higher is better). ``--json`` writes the
tables (flagos.bench_results) for the benchmarks page.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import flagos
from flagos import launch_cache
from flagos.bench_results import Plot, Table, write_json


def native_reference(device: int = 0) -> torch.device | None:
    """The native device flagos:``device`` is measured against: its twin (cpu for sim,
    cuda:N for the cuda HAL), or without a twin (``FLAGOS_NO_TWIN=1``) the device the HAL
    says addresses its memory (``native_device``), used beside flagos as plain PyTorch;
    None where there is none this process can use (a chip nothing else addresses)."""
    twin = flagos.twin_device(device)
    if twin is not None:
        return twin
    props = flagos.get_device_properties(device)
    kind = props.native_device
    if kind == "cpu":
        return torch.device("cpu")
    module = getattr(torch, kind, None) if kind != "none" else None
    if module is not None and hasattr(module, "is_available") and module.is_available():
        return torch.device(kind, max(props.native_device_index, 0))
    return None


def _native_device() -> torch.device:
    native = native_reference(0)
    if native is None:
        raise SystemExit("flagos.bench compares against a native device: flagos:0 has no twin "
                         "and its HAL names no device this process can use")
    return native


def _sync(dev: torch.device) -> None:
    """Wait for the device's queued work, whatever device it is (torch.<type>.synchronize)."""
    torch.get_device_module(dev.type).synchronize(dev)


def timeit(fn: Callable[..., object], dev: torch.device, min_time: float = 0.2,
           repeats: int = 5, args: tuple = (), kwargs: dict | None = None) -> float:
    """Median seconds per call of ``fn(*args, **kwargs)`` (synchronizing ``dev``), over
    ``repeats`` runs."""
    if args or kwargs:
        fn = functools.partial(fn, *args, **(kwargs or {}))
    fn()
    _sync(dev)
    n = 1
    while True:  # calibrate: enough calls to last min_time / repeats
        t = time.perf_counter()
        for _ in range(n):
            fn()
        _sync(dev)
        if time.perf_counter() - t >= min_time / repeats or n >= 1 << 20:
            break
        n *= 2
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        _sync(dev)
        samples.append((time.perf_counter() - t) / n)
    return statistics.median(samples)


def paired(flagos_fn: Callable[[], object], native_fn: Callable[[], object],
           native: torch.device, min_time: float, rounds: int = 3) -> tuple[float, float]:
    """Times both alternately (round-robin) so that machine noise hits both alike."""
    fl, nat = [], []
    for _ in range(rounds):
        fl.append(timeit(flagos_fn, torch.device("flagos", 0), min_time))
        nat.append(timeit(native_fn, native, min_time))
    return min(fl), min(nat)


def bench_alloc(native: torch.device, min_time: float) -> Table:
    t = Table("alloc", "allocator: malloc+free of one tensor (ratio flagos/native)",
              ["bytes", "flagos us", "native us", "ratio"])
    for nbytes in (512, 64 << 10, 4 << 20):
        n = nbytes // 4
        f, c = paired(lambda n=n: torch.empty(n, device="flagos"),
                      lambda n=n: torch.empty(n, device=native), native, min_time)
        t.add(nbytes, f * 1e6, c * 1e6, f / c)
    return t


def bench_copy(native: torch.device, min_time: float) -> Table:
    t = Table("copy", ("host<->device copies, flagos vs the same transfer to/from the native "
                       "device (ratio flagos/native bandwidth)"),
              ["MiB", "direction", "flagos GB/s", "native GB/s", "ratio"])
    for mib in (1, 64):
        n = (mib << 20) // 4
        host = torch.randn(n)
        pinned = host.pin_memory()
        dev = torch.empty(n, device="flagos")
        nat = torch.empty(n, device=native)
        for name, pairs in (
            ("to device, pageable", ((dev.copy_, host), (nat.copy_, host))),
            ("to device, pinned", ((dev.copy_, pinned), (nat.copy_, pinned))),
            ("to host, pageable", ((host.copy_, dev), (host.copy_, nat))),
            ("to host, pinned", ((pinned.copy_, dev), (pinned.copy_, nat))),
        ):
            kw = {"non_blocking": "pinned" in name}
            (f_fn, f_src), (n_fn, n_src) = pairs
            t_f = timeit(f_fn, torch.device("flagos", 0), min_time, args=(f_src,), kwargs=kw)
            t_n = timeit(n_fn, native, min_time, args=(n_src,), kwargs=kw)
            t.add(mib, name, n * 4 / t_f / 1e9, n * 4 / t_n / 1e9, t_n / t_f)
    return t


SMALL_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "add": lambda a, b: a + b,
    "mul_": lambda a, b: a.mul_(1.0),
    "mm": lambda a, b: a @ b,
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
    "softmax": lambda a, b: torch.softmax(a, -1),
}


def bench_ops(native: torch.device, min_time: float,
              routes: tuple[str, ...] = ("boxing", "cpu")) -> Table:
    routes = tuple(r for r in routes if r in flagos.routing.providers())
    t = Table("ops", (f"per-op latency, 16x16 float32, on {flagos.get_device_name(0)} vs "
                      f"{native.type} (ratio route/native; 1.0 is parity)"),
              ["op", *(f"{r} us" for r in routes), "native us",
               *(f"{r} ratio" for r in routes)],
              plot=Plot("bar", "op", [f"{r} ratio" for r in routes],
                        ylabel="time per op / native", reference=1.0))
    a_n, b_n = torch.randn(16, 16, device=native), torch.randn(16, 16, device=native)
    a_f, b_f = a_n.to("flagos"), b_n.to("flagos")
    times: dict[str, dict[str, tuple[float, float]]] = {}
    for route in routes:
        with flagos.routing.override({"default": [route]}):
            for name, fn in SMALL_OPS.items():
                times.setdefault(name, {})[route] = paired(
                    lambda fn=fn: fn(a_f, b_f), lambda fn=fn: fn(a_n, b_n), native, min_time)
    for name, per in times.items():
        nat = min(c for _, c in per.values())  # the native side, timed beside each route
        t.add(name, *(per[r][0] * 1e6 for r in routes), nat * 1e6,
              *(per[r][0] / per[r][1] for r in routes))
    return t


LAYERS: dict[str, Callable[[dict[str, torch.Tensor]], object]] = {
    "conv2d": lambda t: F.conv2d(t["x"], t["w"], t["b"], padding=1),
    "conv2d_nobias": lambda t: F.conv2d(t["x"], t["w"], None, padding=1),
    "batch_norm": lambda t: F.batch_norm(t["y"], t["mean"], t["var"], training=False),
    "avgpool": lambda t: F.adaptive_avg_pool2d(t["y"], 1),
    "linear": lambda t: F.linear(t["v"], t["fc"]),
}


def bench_layers(native: torch.device, min_time: float) -> Table:
    """A conv net's layers (inference) through boxing: ops whose twin kernels allocate
    their results (convolution, batch norm), which flagos then adopts or copies."""
    n, c, hw = (32, 64, 64) if native.type == "cuda" else (8, 16, 32)
    torch.manual_seed(0)
    t_n = {"x": torch.randn(n, 3, hw, hw), "w": torch.randn(c, 3, 3, 3), "b": torch.randn(c),
           "y": torch.randn(n, c, hw, hw), "mean": torch.zeros(c), "var": torch.ones(c),
           "v": torch.randn(n, c), "fc": torch.randn(10, c)}
    t_n = {k: v.to(native) for k, v in t_n.items()}
    t_f = {k: v.to("flagos") for k, v in t_n.items()}
    t = Table("layers", (f"conv-net layers, inference, {n}x3x{hw}x{hw} input, {c} channels, "
                         "through boxing (ratio boxing/native)"),
              ["layer", "flagos us", "native us", "ratio"])
    with torch.no_grad(), flagos.routing.override({"default": ["boxing"]}):
        for name, fn in LAYERS.items():
            f, nat = paired(lambda fn=fn: fn(t_f), lambda fn=fn: fn(t_n), native, min_time)
            t.add(name, f * 1e6, nat * 1e6, f / nat)
    return t


def bench_model(native: torch.device, min_time: float, quick: bool) -> Table:
    """Forward+backward of a Llama-style stack, flagos vs native, same weights and batch.
    On CUDA: 8 layers of dim 2048 in bf16, 8x1024 tokens a step (a few TFLOP per step)."""
    from flagos.models import LlamaConfig, TinyLlama
    from flagos.models.clean_process import CleanProcessTimer, time_steps

    big = native.type == "cuda" and not quick
    cfg = LlamaConfig(dim=2048 if big else 128, n_layers=8 if big else 2,
                      n_heads=16 if big else 4, hidden_dim=5632 if big else 344,
                      max_seq_len=1025 if big else 129, vocab_size=32000 if big else 512)
    batch, seq = (8, 1024) if big else (8, 128)
    dtype = torch.bfloat16 if native.type == "cuda" else torch.float32
    steps = 10 if big else 5
    torch.manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1))
    results: dict[str, float] = {}
    rounds: dict[str, list[float]] = {}
    no_twin = flagos.twin_device(0) is None
    table = Table("model-no-twin" if no_twin else "model",
                  (f"model: TinyLlama {cfg.n_layers}x{cfg.dim} "
                   f"{str(dtype).split('.')[-1]} forward+backward, batch {batch}x{seq}, "
                   f"mean of {steps} steps, best of 2 rounds"
                   + (", flagos without a twin vs plain PyTorch" if no_twin else "")),
                  ["model", "flagos tok/s", "native tok/s", "throughput ratio"],
                  plot=Plot("bar", "model", ["throughput ratio"],
                            ylabel="flagos / native throughput", reference=1.0))
    flagos.routing.reset_stats()
    cache_before, not_kept_before = launch_cache.stats(), launch_cache.not_kept()
    flagos_dev = torch.device("flagos", 0)
    torch.manual_seed(1)
    model = TinyLlama(cfg).to(device=flagos_dev, dtype=dtype)
    flagos_tokens = tokens.to(flagos_dev)
    sides: dict[str, Callable[[int, int], float]] = {
        "flagos": lambda warmup, n: time_steps(model, flagos_tokens, lambda: _sync(flagos_dev),
                                               warmup, n)}
    if native.type == "cpu":
        torch.manual_seed(1)
        native_model = TinyLlama(cfg).to(device=native, dtype=dtype)
        sides[native.type] = lambda warmup, n: time_steps(native_model, tokens, lambda: None,
                                                          warmup, n)
        timer = None
    else:
        # An accelerator's backward cannot run in this process (see clean_process.py).
        timer = CleanProcessTimer(dataclasses.asdict(cfg), str(native), dtype, batch, seq,
                                  seed=1)
        sides[native.type] = timer
        table.notes.append(f"{native.type} timed in a clean process without flagos: "
                           "pytorch/pytorch#161129")
    try:
        # Alternate the devices so drift (clocks, other load) hits both alike.
        for rnd in range(2):
            for name, run in sides.items():
                t = run(2 if rnd == 0 else 0, steps)
                results[name] = min(results.get(name, t), t)
                rounds.setdefault(name, []).append(t)
                print(f"  round {rnd} {name}: {t * 1e3:.1f} ms/step", flush=True)
    finally:
        if timer is not None:
            timer.close()
    f, c = results["flagos"], results[native.type]
    tok = batch * seq
    used: dict[str, int] = {}
    for per in flagos.routing.stats().values():
        for provider, st in per.items():
            used[provider] = used.get(provider, 0) + st["calls"]
    table.add(f"TinyLlama {cfg.n_layers}x{cfg.dim}", tok / f, tok / c, c / f)
    table.notes.append("flagos ops by provider: " +
                       ", ".join(f"{p} {n}" for p, n in sorted(used.items())))
    cache = {k: n - cache_before[k] for k, n in launch_cache.stats().items()}
    if cache["relaunched"] or cache["python"]:
        why = launch_cache.not_kept_since(not_kept_before)
        table.notes.append(
            f"launch cache: {cache['relaunched']} calls relaunched from C++, {cache['python']} "
            "through Python" + "".join(f"; not kept, {r}: {n}" for r, n in why.items()))
    table.notes.append("rounds: " + "; ".join(
        f"{name} {', '.join(f'{s * 1e3:.1f}' for s in times)} ms/step"
        for name, times in rounds.items()))
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shorter timings")
    p.add_argument("--only", default="alloc,copy,ops,layers,model")
    p.add_argument("--routes", default="boxing,cpu",
                   help="the routes the per-op section times (the CPU route of a CUDA HAL "
                        "copies through the host: tens of seconds)")
    p.add_argument("--json", default="", help="also write the tables here (JSON)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads for both sides (0: torch's default). On a loaded "
                        "machine 1 avoids OpenMP barriers waiting for a time slice")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    native = _native_device()
    min_time = 0.05 if args.quick else 0.3
    print(f"# flagos bench: torch {torch.__version__}, flagos:0 = "
          f"{flagos.get_device_name(0)} (HAL {flagos.get_device_properties(0).hal}), "
          f"native reference {native}, {torch.get_num_threads()} CPU threads")
    sections = {"alloc": lambda: bench_alloc(native, min_time),
                "copy": lambda: bench_copy(native, min_time),
                "ops": lambda: bench_ops(native, min_time, tuple(args.routes.split(","))),
                "layers": lambda: bench_layers(native, min_time),
                "model": lambda: bench_model(native, min_time, args.quick)}
    tables = run_sections(sections, args.only)
    if args.json:
        write_json(args.json, tables)
    return 0


def run_sections(sections: dict[str, Callable[[], Table]], only: str) -> list[Table]:
    """Runs the comma-separated sections of ``only`` in order, printing each table."""
    tables = []
    for name in only.split(","):
        table = sections[name.strip()]()
        print(table.format(), flush=True)
        tables.append(table)
    return tables


if __name__ == "__main__":
    sys.exit(main())
