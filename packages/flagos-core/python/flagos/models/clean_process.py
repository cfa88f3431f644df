"""Training-step timing of a TinyLlama, in this process or in a clean one.

Why a clean process: once a PrivateUse1 backend such as flagos is registered,
``at::getAccelerator()`` names PrivateUse1 even where CUDA is present, so the autograd
engine finds no stream for CUDA nodes and every CUDA backward fails with
``opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED`` (pytorch/pytorch#161129,
torch 2.8 and later). Benchmarks that compare a flagos training step with a native CUDA
one therefore time the native side in a child interpreter that never loads flagos
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), driven step batch by step batch so that the rounds
of both sides still interleave.

Run as a script (``python clean_process.py SPEC_JSON``) it serves that protocol:
one line ``STEPS WARMUP`` on stdin, one line with the seconds per step on stdout;
``quit`` ends it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import torch


def train_step(model: torch.nn.Module, tokens: torch.Tensor) -> None:
    """One forward and backward of a next-token loss (gradients accumulate)."""
    model.loss(tokens).backward()


def time_steps(model: torch.nn.Module, tokens: torch.Tensor, sync: Callable[[], None],
               warmup: int, steps: int) -> float:
    """Seconds per training step, after `warmup` untimed steps."""
    for _ in range(warmup):
        train_step(model, tokens)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        train_step(model, tokens)
    sync()
    return (time.perf_counter() - start) / steps


class CleanProcessTimer:
    """Times training steps of the model described by `config` on a native `device`,
    in a child interpreter without flagos. Call it like ``time_steps`` (without the model)."""

    def __init__(self, config: dict, device: str, dtype: torch.dtype,
                 batch: int, seq: int, seed: int = 0, setup: str | None = None) -> None:
        """``setup``: ``"module:function"`` the child calls first (``"flag_gems:enable"``
        times native CUDA with FlagGems' kernels registered)."""
        spec = {"config": config, "device": device, "dtype": str(dtype).split(".")[-1],
                "batch": batch, "seq": seq, "seed": seed, "setup": setup}
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        self._proc = subprocess.Popen([sys.executable, __file__, json.dumps(spec)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=env)

    def __call__(self, warmup: int, steps: int) -> float:
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(f"{steps} {warmup}\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the clean native process exited (code {self._proc.wait()}); "
                               "its error is printed above")
        return float(line)

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin
            self._proc.stdin.write("quit\n")
            self._proc.stdin.close()
            self._proc.wait(timeout=60)


def _serve(spec: dict) -> None:
    # The model module by its plain name, from this file's folder: importing the flagos
    # package would register the device.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from llama import LlamaConfig, TinyLlama

    if spec.get("setup"):
        import importlib

        module, _, function = spec["setup"].partition(":")
        getattr(importlib.import_module(module), function)()
    dev = torch.device(spec["device"])
    torch.manual_seed(spec["seed"])
    cfg = LlamaConfig(**spec["config"])
    model = TinyLlama(cfg).to(device=dev, dtype=getattr(torch, spec["dtype"]))
    tokens = torch.randint(0, cfg.vocab_size, (spec["batch"], spec["seq"] + 1)).to(dev)
    sync = (lambda: torch.get_device_module(dev.type).synchronize(dev)) \
        if dev.type != "cpu" else (lambda: None)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        steps, warmup = (int(v) for v in line.split())
        print(time_steps(model, tokens, sync, warmup, steps), flush=True)


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
