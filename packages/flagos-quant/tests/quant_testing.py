"""Helpers of flagos-quant's tests (a module of its own name: the test folders of several
packages may run in one pytest process, each with its own conftest)."""

from __future__ import annotations

import flagos


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
