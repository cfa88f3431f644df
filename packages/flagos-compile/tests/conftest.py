"""Shared setup: the sim HAL, an Inductor cache under /tmp, a fresh Dynamo per test."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "flagos_compile_inductor_cache"))

import flagos_compile  # noqa: F401 - registers flagos with Dynamo and Inductor
import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def full_fp32_on_cuda_twins():
    """These tests compare flagos on a CUDA twin with the CPU at fp32 tolerances; cudnn's
    default TF32 convolutions (and TF32 matmuls where enabled) differ by ~1e-2."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def assert_close(a: torch.Tensor, b: torch.Tensor, **kw) -> None:
    torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), **kw)


@pytest.fixture
def sim_twin() -> None:
    """Skip unless flagos:0 runs on the host (sim): the test checks the C++ kernel path."""
    if torch.flagos.get_device_properties(0).native_device != "cpu":
        pytest.skip("checks the C++ (host twin) code path; this HAL's twin is not the CPU")
