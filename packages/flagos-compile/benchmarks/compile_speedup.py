"""Speedup of torch.compile (Inductor) over eager on flagos, against the same ratio on the
native twin device, for an MLP, a small transformer and a conv net.

    python benchmarks/compile_speedup.py                  # flagos (sim) vs native CPU
    python benchmarks/compile_speedup.py --device cuda    # flagos (CUDA HAL) vs native CUDA

For every model the four variants (flagos eager, flagos compiled, native eager, native
compiled) run in interleaved rounds and the median of the rounds is kept, so drift of the
machine hits all four alike. Native CUDA variants run in a child interpreter that never
loads flagos, driven round by round: once a PrivateUse1 backend is registered, every CUDA
backward in that process fails (pytorch/pytorch#161129; see flagos/models/clean_process.py).
Native CPU variants run in this process. The last
column is (flagos compiled/eager speedup) / (native compiled/eager speedup): 1.0 means
flagos gains exactly what the native device gains from compiling.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "flagos_compile_bench_cache"))

import torch


def _models_module():
    """flagos_compile/models.py by path: importing the package would register flagos."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "..", "python", "flagos_compile", "models.py")]
    found = importlib.util.find_spec("flagos_compile")
    if found and found.submodule_search_locations:
        candidates += [os.path.join(d, "models.py") for d in found.submodule_search_locations]
    path = next(c for c in candidates if os.path.exists(c))
    spec = importlib.util.spec_from_file_location("_flagos_bench_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def models(scale: str) -> dict[str, tuple[torch.nn.Module, torch.Tensor]]:
    """The benchmark's models and inputs, on the CPU (the same values in every process)."""
    m = _models_module()
    MLP, ConvNet, TinyTransformer = m.MLP, m.ConvNet, m.TinyTransformer
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


def variants_on(dev: str, args: argparse.Namespace) -> dict[tuple[str, str], Callable]:
    """(model, "eager"|"compiled") -> one step of that model on `dev`."""
    out = {}
    for name, (model, x) in models(args.scale).items():
        m = copy.deepcopy(model).to(dev)
        if not args.train:
            m.eval()
        xd = x.to(dev)
        c = torch.compile(m, **({"backend": args.backend} if args.backend else {}))
        out[(name, "eager")] = step_fn(m, xd, args.train)
        out[(name, "compiled")] = step_fn(c, xd, args.train)
    return out


class InProcess:
    """Variants timed in this process."""

    def __init__(self, dev: str, args: argparse.Namespace) -> None:
        self._steps = variants_on(dev, args)
        self._sync = synchronizer(dev)

    def names(self) -> list[str]:
        return list(dict.fromkeys(n for n, _ in self._steps))

    def time(self, name: str, variant: str, iters: int) -> float:
        fn = self._steps[(name, variant)]
        if iters == 0:
            fn()
            self._sync()
            return 0.0
        return timed(fn, self._sync, iters)

    def close(self) -> None:
        pass


class NativeChild:
    """The native variants, timed in a child interpreter without flagos (for CUDA)."""

    def __init__(self, args: argparse.Namespace) -> None:
        spec = {k: getattr(args, k) for k in ("device", "scale", "train", "backend")}
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve-native", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def time(self, name: str, variant: str, iters: int) -> float:
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(f"{name} {variant} {iters}\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the native child process exited (code {self._proc.wait()}); "
                               "its error is printed above")
        return float(line)

    def close(self) -> None:
        if self._proc.poll() is None and self._proc.stdin:
            self._proc.stdin.close()
            self._proc.wait(timeout=120)


def serve_native(spec: dict) -> None:
    """Child side of NativeChild: one line "MODEL VARIANT ITERS" in, seconds per call out
    (ITERS 0: run once untimed, to compile and warm up)."""
    side = InProcess(spec["device"], argparse.Namespace(**spec))
    for line in sys.stdin:
        name, variant, iters = line.split()
        print(side.time(name, variant, int(iters)), flush=True)


def run(args: argparse.Namespace) -> None:
    # Here, not at the top: the native child (serve_native) must never load flagos.
    import flagos_compile  # noqa: F401 - registers flagos with Dynamo and Inductor
    from flagos.bench_results import Plot, Table

    native = args.device
    if native == "cuda":
        twin = torch.flagos.get_device_properties(0).native_device
        if twin != "cuda":
            sys.exit(f"--device cuda needs flagos on the CUDA HAL; flagos:0's twin is {twin}")
    flagos_side = InProcess("flagos", args)
    # A CPU twin runs in this process: a child's idle OpenMP threads would spin on the
    # cores the other side is being timed on.
    native_side = InProcess(native, args) if native == "cpu" else NativeChild(args)
    sides = {"flagos": flagos_side, native: native_side}
    rows = []
    try:
        for name in flagos_side.names():
            def measure(dev: str, variant: str, iters: int, name: str = name) -> float:
                return sides[dev].time(name, variant, iters)

            keys = [(d, v) for d in ("flagos", native) for v in ("eager", "compiled")]
            for key in keys:  # compile and warm up
                for _ in range(args.warmup):
                    measure(*key, 0)
            times: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
            for _ in range(args.rounds):
                for key in keys:
                    times[key].append(measure(*key, args.iters))
            med = {k: statistics.median(v) for k, v in times.items()}
            sp = {d: med[(d, "eager")] / med[(d, "compiled")] for d in ("flagos", native)}
            rows.append((name, med, sp, sp["flagos"] / sp[native]))
    finally:
        native_side.close()

    mode = "train step (fwd+bwd)" if args.train else "inference (fwd, no_grad)"
    table = Table(
        "compile-train" if args.train else "compile",
        (f"torch.compile speedup on flagos vs on native {native}: {mode}, scale={args.scale}, "
         f"backend={args.backend or 'inductor'}, median of {args.rounds} rounds (ratio = "
         f"flagos compiled/eager speedup / {native} speedup; 1.0 is parity)"),
        ["model", "flagos eager ms", "flagos compiled ms", "flagos speedup",
         f"{native} eager ms", f"{native} compiled ms", f"{native} speedup", "ratio"],
        plot=Plot("bar", "model", ["ratio"], ylabel="speedup on flagos / speedup native",
                  reference=1.0))
    for name, med, sp, ratio in rows:
        table.add(name, med[("flagos", "eager")] * 1e3, med[("flagos", "compiled")] * 1e3,
                  sp["flagos"], med[(native, "eager")] * 1e3, med[(native, "compiled")] * 1e3,
                  sp[native], ratio)
    geo = statistics.geometric_mean([r[3] for r in rows])
    table.notes.append(f"geomean ratio {geo:.3f}")
    if native != "cpu":
        table.notes.append(f"{native} timed in a clean child process (pytorch/pytorch#161129)")
    print(f"# compile_speedup: torch {torch.__version__}, {platform.machine()} "
          f"{os.cpu_count()} CPUs, flagos:0 = {torch.flagos.get_device_name(0)} "
          f"(twin {torch.flagos.get_device_properties(0).native_device})")
    print(table.format())
    if args.json:
        from flagos.bench_results import write_json

        write_json(args.json, [table])


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
    p.add_argument("--json", default="", help="also write the table here (JSON)")
    p.add_argument("--serve-native", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_native:
        serve_native(json.loads(args.serve_native))
    else:
        run(args)


if __name__ == "__main__":
    main()
