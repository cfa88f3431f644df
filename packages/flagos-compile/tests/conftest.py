"""Shared setup: the sim HAL, an Inductor cache under /tmp, a fresh Dynamo per test."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "flagos_compile_inductor_cache"))

import flagos_compile  # noqa: F401 - registers flagos with Dynamo and Inductor
import pytest
import torch


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
