"""Speedup of torch.compile (Inductor) over eager on flagos, against the same ratio on the
native twin device, for an MLP, a small transformer and a conv net.

    python benchmarks/compile_speedup.py                  # flagos (sim) vs native CPU
    python benchmarks/compile_speedup.py --device cuda    # flagos (CUDA HAL) vs native CUDA

Both devices are measured side by side in one process: for every model the four variants
(flagos eager, flagos compiled, native eager, native compiled) run in interleaved rounds
and the median of the rounds is kept, so drift of the machine hits all four alike. The
last column is (flagos compiled/eager speedup) / (native compiled/eager speedup): 1.0
means flagos gains exactly what the native device gains from compiling.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "flagos_compile_bench_cache"))

import flagos_compile  # noqa: F401
import torch
from flagos_compile.models import MLP, ConvNet, TinyTransformer


def models(scale: str) -> dict[str, tuple[torch.nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    if scale == "small":
        return {
            "mlp": (MLP(256, 1024, 64), torch.randn(64, 256)),
            "transformer": (TinyTransformer(128, 4, 512, 1000), torch.randint(0, 1000, (8, 64))),
            "convnet": (ConvNet(32), torch.randn(8, 3, 32, 32)),
        }
    return {
        "mlp": (MLP(1024, 4096, 256), torch.randn(256, 1024)),
        "transformer": (TinyTransformer(512, 8, 2048, 8000), torch.randint(0, 8000, (16, 128))),
        "convnet": (ConvNet(64), torch.randn(32, 3, 64, 64)),
    }


def synchronizer(device: str) -> Callable[[], None]:
    if device.startswith("flagos"):
        return torch.flagos.synchronize
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def timed(fn: Callable[[], object], sync: Callable[[], None], iters: int) -> float:
    """Seconds per call of fn, averaged over iters calls."""
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def step_fn(model: torch.nn.Module, x: torch.Tensor, train: bool) -> Callable[[], object]:
    if not train:
        def infer() -> object:
            with torch.no_grad():
                return model(x)
        return infer

    def train_step() -> object:
        out = model(x)
        out.float().pow(2).mean().backward()
        return out
    return train_step


def run(args: argparse.Namespace) -> None:
    native = args.device
    if native == "cuda":
        twin = torch.flagos.get_device_properties(0).native_device
        if twin != "cuda":
            sys.exit(f"--device cuda needs flagos on the CUDA HAL; flagos:0's twin is {twin}")
    devices = ["flagos", native]
    rows = []
    for name, (model, x) in models(args.scale).items():
        variants = {}
        for dev in devices:
            m = copy.deepcopy(model).to(dev)
            if not args.train:
                m.eval()
            xd = x.to(dev)
            c = torch.compile(m, **({"backend": args.backend} if args.backend else {}))
            variants[(dev, "eager")] = step_fn(m, xd, args.train)
            variants[(dev, "compiled")] = step_fn(c, xd, args.train)
        for key, fn in variants.items():  # compile and warm up
            for _ in range(args.warmup):
                fn()
            synchronizer(key[0])()
        times: dict[tuple[str, str], list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for key, fn in variants.items():
                times[key].append(timed(fn, synchronizer(key[0]), args.iters))
        med = {k: statistics.median(v) for k, v in times.items()}
        sp = {d: med[(d, "eager")] / med[(d, "compiled")] for d in devices}
        rows.append((name, med, sp, sp["flagos"] / sp[native]))

    mode = "train step (fwd+bwd)" if args.train else "inference (fwd, no_grad)"
    print(f"# compile_speedup: {mode}, scale={args.scale}, backend={args.backend or 'inductor'}, "
          f"torch {torch.__version__}, {platform.machine()} {os.cpu_count()} CPUs, "
          f"flagos:0 = {torch.flagos.get_device_name(0)} "
          f"(twin {torch.flagos.get_device_properties(0).native_device})")
    hdr = (f"{'model':12} {'flagos eager':>13} {'flagos comp':>12} {'flagos x':>9} "
           f"{native + ' eager':>12} {native + ' comp':>12} {native + ' x':>9} {'ratio':>7}")
    print(hdr)
    for name, med, sp, ratio in rows:
        print(f"{name:12} {med[('flagos', 'eager')] * 1e3:11.3f}ms "
              f"{med[('flagos', 'compiled')] * 1e3:10.3f}ms {sp['flagos']:8.2f}x "
              f"{med[(native, 'eager')] * 1e3:10.3f}ms {med[(native, 'compiled')] * 1e3:10.3f}ms "
              f"{sp[native]:8.2f}x {ratio:7.3f}")
    geo = statistics.geometric_mean([r[3] for r in rows])
    print(f"geomean ratio (flagos speedup / {native} speedup): {geo:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="the native device to compare with (flagos must be on its HAL)")
    p.add_argument("--scale", choices=["small", "large"], default="small")
    p.add_argument("--train", action="store_true", help="time a training step, not inference")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    run(p.parse_args())


if __name__ == "__main__":
    main()
