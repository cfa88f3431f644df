"""What the native path costs, on the sim device with opaque memory (FLAGOS_NO_HOST_ALIAS=1).

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

    python packages/flagos-ops-native/benchmarks/native_overhead.py [--iters N] [--steps N]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ["FLAGOS_NO_HOST_ALIAS"] = "1"
os.environ.setdefault("FLAGOS_HAL", "sim")

import flagos
import torch
from flagos.models.llama import LlamaConfig, TinyLlama
from flagos_ops_native import _engine, manifest_dir


def per_call(iters: int) -> None:
    lib = _engine.open_library(str(manifest_dir().parent / "lib" / "libsimk.so"),
                               "simkGetAbiVersion", 1 << 16, 2 << 16, "simkGetLastError")
    a, b = torch.randn(16, device="flagos"), torch.randn(16, device="flagos")
    out = torch.empty(16, device="flagos")
    ca, cb, cout = a.cpu(), b.cpu(), out.cpu()
    with flagos.routing.override({"aten::add": ["native"]}):
        for _ in range(3):  # warm: routes resolved, forms made, caches filled
            direct = _engine.time_direct_binary(lib, "simkAddGetWorkspaceSize", "simkAdd", a, b,
                                                out, iters)
            torch.flagos.synchronize()
            routed = _engine.time_dispatch_add_out(a, b, out, iters)
            torch.flagos.synchronize()
        torch.flagos.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.add(a, b, out=out)
        python = (time.perf_counter() - t0) / iters * 1e9
        torch.flagos.synchronize()
        assert flagos.routing.stats()["aten::add.out"]["native"]["calls"] >= iters
    cpu_cpp = _engine.time_dispatch_add_out(ca, cb, cout, iters)
    t0 = time.perf_counter()
    for _ in range(iters):
        torch.add(ca, cb, out=cout)
    cpu_python = (time.perf_counter() - t0) / iters * 1e9
    print(f"host cost per call, add of 16 float32, {iters} calls (ns):")
    print(f"  simk kernel called directly (plan + execute):     {direct:8.0f}")
    print(f"  at::add_out from C++ through flagos -> native:    {routed:8.0f}   "
          f"added by the native path: {routed - direct:6.0f} ns")
    print(f"  torch.add(out=) from Python through native:       {python:8.0f}")
    print(f"  for scale, the same on CPU tensors: C++ {cpu_cpp:.0f}, Python {cpu_python:.0f}")


def llama(steps: int) -> None:
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    per_call(args.iters)
    llama(args.steps)


if __name__ == "__main__":
    main()
