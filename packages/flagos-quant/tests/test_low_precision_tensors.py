"""Every float8 dtype and packed FP4 (float4_e2m1fn_x2, uint8) on flagos: stored, copied,
cast, sliced, saved and loaded with their bytes intact, on host-aliased memory and (in a
process of its own) on opaque memory (FLAGOS_NO_TWIN=1)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
       torch.float8_e8m0fnu]
LOW = [*FP8, torch.float4_e2m1fn_x2]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.cpu().contiguous().view(torch.uint8)


def _all_patterns(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(256, dtype=torch.uint8).reshape(16, 16).view(dtype)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_store_copy_slice_save_load(dtype) -> None:
    x = _all_patterns(dtype)
    d = x.to("flagos")
    assert d.dtype == dtype and d.device.type == "flagos"
    assert torch.equal(_bytes(d), _bytes(x))
    assert torch.equal(_bytes(d.clone()), _bytes(x))  # device to device
    assert torch.equal(_bytes(d[3:9, 1::3]), _bytes(x[3:9, 1::3]))  # strided slice
    assert torch.equal(_bytes(d.t().contiguous()), _bytes(x.t().contiguous()))
    e = torch.empty_like(d)
    e.copy_(d)
    assert torch.equal(_bytes(e), _bytes(x))
    u = d.view(torch.uint8)  # reinterpretation keeps the bytes
    assert torch.equal(u.cpu(), x.view(torch.uint8))
    buf = io.BytesIO()
    torch.save({"t": d, "s": d[2:5]}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    assert back["t"].device.type == "flagos" and back["t"].dtype == dtype
    assert torch.equal(_bytes(back["t"]), _bytes(x))
    assert torch.equal(_bytes(back["s"]), _bytes(x[2:5]))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_casts_match_cpu(dtype) -> None:
    g = torch.Generator().manual_seed(0)
    v = torch.randn(4096, generator=g) * 50
    if dtype == torch.float8_e8m0fnu:
        v = v.abs() + 1e-3
    for src in (torch.float32, torch.bfloat16, torch.float16):
        want = v.to(src).to(dtype)
        got = v.to(src).to("flagos").to(dtype)
        assert torch.equal(_bytes(got), _bytes(want)), src
    back = want.to("flagos").to(torch.float32).cpu()
    torch.testing.assert_close(back, want.float(), rtol=0, atol=0, equal_nan=True)


def test_opaque_memory_in_a_process_of_its_own(tmp_path: Path) -> None:
    """FLAGOS_NO_TWIN=1: no twin aliases, every op staged (the path of vendors with
    opaque memory). Runs the two tests above there, and an emulated scaled matmul."""
    env = {**os.environ, "FLAGOS_NO_TWIN": "1"}
    here = Path(__file__).parent
    code = (
        f"import sys, torch; sys.path.insert(0, {str(here)!r})\n"
        "import test_low_precision_tensors as t\n"
        "for d in t.LOW: t.test_store_copy_slice_save_load(d)\n"
        "for d in t.FP8: t.test_casts_match_cpu(d)\n"
        "from flagos_quant.quantize import quantize_fp8\n"
        "from flagos_quant.dequant import dequantize_fp8\n"
        "a, sa = quantize_fp8(torch.randn(4, 64)); w, sw = quantize_fp8(torch.randn(8, 64))\n"
        "want = torch.mm(dequantize_fp8(a, sa).bfloat16(), dequantize_fp8(w, sw).bfloat16().t())\n"
        "f = [x.to('flagos') for x in (a, w, sa, sw)]\n"
        "got = torch._scaled_mm(f[0], f[1].t(), f[2], f[3], out_dtype=torch.bfloat16)\n"
        "assert torch.equal(got.cpu(), want)\n"
        "print('opaque ok')\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, check=False)
    assert r.returncode == 0 and "opaque ok" in r.stdout, r.stdout + r.stderr
