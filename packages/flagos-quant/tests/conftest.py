"""Shared set-up of flagos-quant's tests: the tiny checkpoints (written once per session
by make_checkpoints.py, the script that regenerates them) and routing statistics."""

from __future__ import annotations

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


def calls(op: str, provider: str) -> int:
    """How often ``provider`` served ``op`` since the statistics were reset."""
    return flagos.routing.stats().get(op, {}).get(provider, {}).get("calls", 0)


def exact_hal() -> bool:
    """Whether flagos computes with the CPU's kernels here (sim: the CPU twin, or opaque
    memory staged through the CPU), so results equal CPU results bit for bit. On a GPU
    twin the same math runs in other kernels: compared within bf16 tolerance instead."""
    return (flagos.get_device_properties(0).twin_device or "cpu") == "cpu"


def assert_matches_cpu(got, want) -> None:
    """``got`` (from flagos) equals the CPU result ``want``: exactly where flagos runs CPU
    kernels, else within one bf16 rounding of the largest entry per 100 accumulated terms."""
    import torch

    got = got.cpu()
    if exact_hal():
        assert torch.equal(got, want)
    else:
        err = (got.float() - want.float()).abs().max().item()
        assert err <= 1e-2 * want.float().abs().max().item(), err
