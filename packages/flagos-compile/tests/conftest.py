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
