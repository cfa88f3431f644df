"""Shared set-up of flagos-quant's tests: the tiny checkpoints (written once per session
by make_checkpoints.py, the script that regenerates them) and routing statistics."""

from __future__ import annotations

import os

if os.environ.get("FLAGOS_TEST_HW", "sim") == "sim":
    # the Triton kernels of the packed linear ops run under Triton's interpreter on CPU
    # tensors here (read when Triton is imported, so before anything imports it)
    os.environ["TRITON_INTERPRET"] = "1"

import sys
from collections.abc import Iterator
from pathlib import Path

import flagos
import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory with every fixture checkpoint and its bf16 reference."""
    pytest.importorskip("transformers")
    import make_checkpoints

    out = tmp_path_factory.mktemp("checkpoints")
    for fmt in make_checkpoints.FORMATS:
        make_checkpoints.write(out, fmt)
    return out


@pytest.fixture
def stats() -> Iterator[None]:
    """Routing statistics counted from zero for the test."""
    flagos.routing.reset_stats()
    yield
