"""Pay the gems provider's first-call costs ahead of time: compile every Triton kernel a
model needs and run FlagGems' autotuning for its shapes, into the caches that later
processes read.

A first call of a FlagGems op compiles its Triton kernel for the shapes' specialization
(seconds) and, for autotuned kernels (``mm``, reductions), times each candidate config
(on a fresh machine the first ``mm`` of a Llama step has taken minutes). Both results are
kept on disk, Triton's compiled kernels in its cache (``TRITON_CACHE_DIR``, default
``~/.triton/cache``) and FlagGems' chosen configs in its database (``FLAGGEMS_CACHE_DIR``,
default ``~/.flaggems``), so a process that finds them there pays neither. This command
runs the work once with the gems routes:

    python -m flagos_ops_gems.warm --tinyllama 8x2048 --batch 8x1024   # flagos.bench's model
    python -m flagos_ops_gems.warm --script train.py [-- ARGS...]      # a script, run once

and prints the caches' sizes before and after, the time of each step (the first pays the
compiling and tuning, the next show the steady state), and which provider served the
calls, naming the ops that reached the CPU fallback. Run it with the environment the
model will run with (``FLAGOS_HAL``, ``FLAGOS_NO_TWIN``, the cache variables): kernels are
cached per target and per specialization. Exit status 2: gems is not available on
flagos:0 (the reason is printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import runpy
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["WarmReport", "cache_dirs", "calls_by_provider", "main", "warm"]


def cache_dirs() -> dict[str, Path]:
    """Where Triton keeps compiled kernels and FlagGems its autotuning results, as this
    process's environment sets them."""
    try:
        import triton

        triton_dir = triton.knobs.cache.dir  # TRITON_CACHE_DIR, else under TRITON_HOME
    except (ImportError, AttributeError):
        triton_dir = os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache")
    # FlagGems' own rule (flag_gems.utils.code_cache.cache_dir_path), without importing
    # FlagGems, whose import needs its device set up
    flaggems = os.environ.get("FLAGGEMS_CACHE_DIR") or str(Path.home() / ".flaggems")
    return {"triton": Path(triton_dir), "flaggems": Path(flaggems)}


def _size(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.path.getsize(os.path.join(root, name))
                files += 1
            except OSError:
                pass
    return files, size


def calls_by_provider(stats: dict[str, dict[str, dict[str, int]]]
                      ) -> tuple[dict[str, int], dict[str, int]]:
    """From ``flagos.routing.stats()``: the calls each provider served, and the calls of
    each op that reached the CPU fallback."""
    used: dict[str, int] = {}
    on_cpu: dict[str, int] = {}
    for op, per in stats.items():
        for provider, st in per.items():
            if st.get("calls"):
                used[provider] = used.get(provider, 0) + st["calls"]
                if provider == "cpu":
                    on_cpu[op] = on_cpu.get(op, 0) + st["calls"]
    return used, on_cpu


@dataclasses.dataclass
class WarmReport:
    """What :func:`warm` did: seconds per step, calls per provider and CPU-fallback calls
    per op over all steps, the caches' (files, bytes) before and after."""

    step_seconds: list[float]
    calls: dict[str, int]
    on_cpu: dict[str, int]
    caches_before: dict[str, tuple[int, int]]
    caches_after: dict[str, tuple[int, int]]

    def lines(self) -> list[str]:
        out = [f"step {i}: {s:.2f} s" for i, s in enumerate(self.step_seconds, 1)]
        for name, path in cache_dirs().items():
            (f0, b0), (f1, b1) = self.caches_before[name], self.caches_after[name]
            out.append(f"{name} cache {path}: {f0} -> {f1} files, {b0 / 2**20:.1f} -> "
                       f"{b1 / 2**20:.1f} MiB")
        out.append("calls by provider: " + (", ".join(
            f"{p} {n}" for p, n in sorted(self.calls.items())) or "none"))
        if self.on_cpu:
            out.append("on the CPU fallback: " + ", ".join(
                f"{op} {n}" for op, n in sorted(self.on_cpu.items(), key=lambda kv: -kv[1])))
        return out


def warm(step: Callable[[], None], steps: int = 2, routes: str = "gems") -> WarmReport:
    """Run ``step`` ``steps`` times with the routing file ``routes`` loaded, each step
    timed to the end of its device work; the routes are reset afterwards
    (:func:`flagos.routing.reset`: what the environment and the shipped files say)."""
    import flagos
    import torch

    before = {name: _size(path) for name, path in cache_dirs().items()}
    seconds = []
    flagos.routing.reset_stats()
    flagos.routing.load(routes)
    try:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            torch.flagos.synchronize()
            seconds.append(time.perf_counter() - t0)
        calls, on_cpu = calls_by_provider(flagos.routing.stats())
    finally:
        flagos.routing.reset()
    after = {name: _size(path) for name, path in cache_dirs().items()}
    return WarmReport(seconds, calls, on_cpu, before, after)


def _pair(text: str, what: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"flagos_ops_gems.warm: {what} is AxB (e.g. 8x1024), got {text!r}") from None
    return a, b


def _tinyllama_step(layers_dim: str, batch_seq: str, dtype: str) -> Callable[[], None]:
    """The benchmarks' Llama stack of ``layers_dim`` (8x2048 in flagos.bench, 4x1024 in
    gems_bench --quick) on flagos:0: one forward and backward of ``batch_seq`` tokens."""
    import torch
    from flagos.models import LlamaConfig, TinyLlama
    from flagos.models.clean_process import train_step

    layers, dim = _pair(layers_dim, "--tinyllama")
    batch, seq = _pair(batch_seq, "--batch")
    big = dim >= 1024  # the benchmarks' sizes: 16 heads, a 32000-token vocabulary
    cfg = LlamaConfig(dim=dim, n_layers=layers, n_heads=16 if big else 4,
                      hidden_dim=dim * 11 // 4, max_seq_len=seq + 1,
                      vocab_size=32000 if big else 512)
    torch.manual_seed(0)
    model = TinyLlama(cfg).to(device="flagos", dtype=getattr(torch, dtype))
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1)).to("flagos")
    return lambda: train_step(model, tokens)


def _script_step(script: str, args: Sequence[str]) -> Callable[[], None]:
    def run() -> None:
        saved = sys.argv
        sys.argv = [script, *args]
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            sys.argv = saved

    return run


def _unavailable() -> str | None:
    import flagos
    import torch

    provider = flagos.routing.providers().get("gems")
    if provider is None:
        return "the gems provider is not registered (flagos-ops-gems is not installed)"
    return provider.unavailable_on(torch.flagos.get_device_properties(0).hal)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flagos_ops_gems.warm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--tinyllama", metavar="LAYERSxDIM",
                      help="flagos.bench's Llama stack (8x2048 there)")
    what.add_argument("--script", help="a Python script, run once per step")
    p.add_argument("--batch", default="8x1024", metavar="BATCHxSEQ", help="(--tinyllama)")
    p.add_argument("--dtype", default="bfloat16", help="(--tinyllama)")
    p.add_argument("--steps", type=int, help="steps to run (default: 2; --script: 1)")
    p.add_argument("args", nargs="*", help="the script's arguments (after --)")
    ns = p.parse_args(argv)
    why = _unavailable()
    if why:
        print(f"flagos_ops_gems.warm: gems is not available on flagos:0: {why}", file=sys.stderr)
        return 2
    if ns.tinyllama:
        step = _tinyllama_step(ns.tinyllama, ns.batch, ns.dtype)
        steps = ns.steps or 2
    else:
        step = _script_step(ns.script, ns.args)
        steps = ns.steps or 1
    for line in warm(step, steps).lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
