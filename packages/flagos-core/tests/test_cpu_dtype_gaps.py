"""Dtypes the CPU's kernels lack and CUDA's have (torch.histc on integers, as transformers'
MoE routing calls it on accelerators; abs on bool): flagos runs such ops on CPU kernels
(sim, opaque HALs, the cpu provider), so it computes them in a wider dtype, exactly."""

from __future__ import annotations

import flagos
import pytest
import torch

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def _calls(op: str) -> int:
    return next(g["calls"] for g in flagos.routing.cpu_dtype_gaps() if g["op"] == op)


@pytest.mark.parametrize("dtype", INTS)
def test_histc_of_expert_ids_counts_like_bincount(dtype):
    torch.manual_seed(0)
    ids = torch.randint(0, 8, (64,), dtype=dtype)
    before = _calls("aten::histc")
    got = torch.histc(ids.to("flagos"), bins=8, min=0, max=7)
    assert got.device.type == "flagos" and got.dtype == dtype
    assert got.cpu().tolist() == torch.bincount(ids.long(), minlength=8).tolist()
    if torch.flagos.get_device_properties(0).native_device == "cpu":
        assert _calls("aten::histc") == before + 1


def test_histc_uneven_bins_and_out():
    x = torch.arange(0, 11, dtype=torch.int32)
    # bin of x: (x - min) * bins // (max - min), the last edge in the last bin
    want = [0] * 3
    for v in x.tolist():
        want[min(v * 3 // 10, 2)] += 1
    assert torch.histc(x.to("flagos"), bins=3, min=0, max=10).cpu().tolist() == want
    out = torch.full((1,), 7, dtype=torch.int32, device="flagos")
    r = torch.histc(x.to("flagos"), bins=3, min=0, max=10, out=out)
    assert r is out and out.cpu().tolist() == want


def test_histc_floats_are_not_widened():
    before = _calls("aten::histc")
    x = torch.rand(32)
    torch.testing.assert_close(torch.histc(x.to("flagos"), bins=4).cpu(), torch.histc(x, bins=4))
    assert _calls("aten::histc") == before


def test_abs_of_bool():
    x = torch.tensor([True, False, True])
    got = torch.abs(x.to("flagos"))
    assert got.dtype == torch.bool and got.cpu().tolist() == [True, False, True]


def test_cpu_route_and_opaque_memory_close_the_gap(run_python):
    with flagos.routing.override({"default": ["cpu"]}):
        ids = torch.tensor([0, 2, 2, 3], dtype=torch.int32, device="flagos")
        assert torch.histc(ids, bins=4, min=0, max=3).cpu().tolist() == [1, 0, 2, 1]
    run_python(
        "import torch\n"
        "ids = torch.tensor([0, 2, 2, 3], dtype=torch.int32, device='flagos')\n"
        "assert torch.histc(ids, bins=4, min=0, max=3).cpu().tolist() == [1, 0, 2, 1]\n",
        env={"FLAGOS_NO_TWIN": "1"})
