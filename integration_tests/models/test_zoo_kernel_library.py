"""Zoo models through a Python Triton kernel library served by flagos-ops-gems' provider:
the project's own test kernels (add, neg, ...; FlagGems cannot run on sim), put ahead of
boxing for every op they implement, under Triton's interpreter on sim and compiled on a
CUDA HAL. Forward, the training step's backward (on autograd's device thread) and
generation reach the library's kernels and its declines, on real models.

Triton must be imported with the interpreter switched on, so each case runs in a process
of its own (``zoo_run.py --kernel-library``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from zoo_cases import CASES
from zoo_check import hal_name, run_in_process

ROOT = Path(__file__).resolve().parents[2]
TEST_KERNELS = ROOT / "packages" / "flagos-ops-gems" / "tests"


@pytest.mark.parametrize("name", ["Llama", "UNet2DModel"])
def test_model_matches_cpu_through_a_kernel_library(name: str) -> None:
    pytest.importorskip("triton")
    pytest.importorskip("flagos_ops_gems")
    pytest.importorskip(CASES[name].library)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(TEST_KERNELS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for setting in ("FLAGOS_ROUTES_FILE", "FLAGOS_ROUTES", "FLAGOS_NO_TWIN",
                    "TRITON_INTERPRET", *(k for k in env if k.startswith("FLAGOS_SHADOW"))):
        env.pop(setting, None)  # the routes and paths under test are the run's own
    if hal_name() == "sim":
        env["TRITON_INTERPRET"] = "1"
    proc, record = run_in_process(name, "kernel-library", env, "--kernel-library",
                                  "triton_test_kernels:TritonTestKernels")
    assert proc.returncode == 0 and record and record["status"] == "pass", (
        f"{name} through the test kernel library failed ({proc.returncode})\n"
        f"{proc.stdout}\n{proc.stderr}")
    # the residual adds are float32, contiguous and of one shape: the library's add runs them
    assert record["library_calls"].get("aten::add.Tensor", 0) > 0, record
