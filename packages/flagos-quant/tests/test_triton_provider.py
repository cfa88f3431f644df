"""The provider quant-triton: flagos-quant's packed linear kernels on flagos tensors of a
device without a twin, launched through the HAL. On sim (no Triton target) the routing and
the reasons it is skipped; on a GPU with FLAGOS_NO_TWIN=1 the kernels themselves against
the CPU, and the one-row launches repeated from C++."""

from __future__ import annotations

import os
import subprocess
import sys

import flagos
import pytest

GPU = os.environ.get("FLAGOS_TEST_HW") == "cuda"


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    # the scripts share the tests' helpers (quant_testing)
    here = os.path.dirname(os.path.abspath(__file__))
    full["PYTHONPATH"] = os.pathsep.join(p for p in (here, full.get("PYTHONPATH")) if p)
    for var in ("FLAGOS_ROUTES_FILE", "FLAGOS_ROUTES"):
        full.pop(var, None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, timeout=300, check=False)


def test_with_a_twin_it_is_skipped_and_says_why() -> None:
    quant = flagos.routing.providers()["quant-triton"]
    hal = flagos.get_device_properties(0).hal
    assert "twin" in quant.unavailable_on(hal)
    assert "quant-triton" in str(flagos.routing.explain("flagos_quant::fp8_weight_linear"))


ROUTED_WITHOUT_A_TWIN = r"""
import flagos, torch
from flagos import launch_cache
from flagos_quant import triton_provider
from flagos_quant.fused_linear import FP8_WEIGHT_LINEAR, fp8_weight_linear
from flagos_quant.quantize import quantize_fp8

assert torch.flagos.get_device_properties(0).twin_device == "none"
reason = flagos.routing.providers()["quant-triton"].unavailable_on("sim")
assert "no Triton backend compiles for flagos:0" in reason, reason

# the kernel as a stand-in (sim has no Triton target): the call must reach it with the
# flagos tensors, and its result be the op's
seen = []


def stand_in(x, weight, weight_scale, block, bias):
    seen.append((x.device.type, weight.dtype))
    return flagos_quant_reference(x, weight, weight_scale, block, bias)


from flagos_quant.fused_linear import fp8_weight_linear_reference as flagos_quant_reference
triton_provider._unavailable = lambda hal: None
triton_provider._hal_driver = lambda: None
triton_provider._KERNELS[FP8_WEIGHT_LINEAR] = launch_cache.watched(stand_in)
flagos.routing.reset()
q, s = quantize_fp8(torch.randn(24, 32))
x = torch.randn(2, 32)
got = fp8_weight_linear(x.to("flagos"), q.to("flagos"), s.to("flagos"), None, None)
torch.testing.assert_close(got.cpu(), fp8_weight_linear(x, q, s, None, None))
assert seen == [("flagos", torch.float8_e4m3fn)], seen
assert flagos.routing.stats()[FP8_WEIGHT_LINEAR]["quant-triton"]["calls"] == 1
print("ok")
"""


def test_without_a_twin_the_ops_reach_its_kernels() -> None:
    r = _run(ROUTED_WITHOUT_A_TWIN, FLAGOS_NO_TWIN="1", FLAGOS_HAL="sim")
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


ON_A_GPU_WITHOUT_A_TWIN = r"""
import flagos, torch
from flagos import launch_cache
from flagos_quant.fused_linear import (FP8_WEIGHT_LINEAR, NVFP4_WEIGHT_LINEAR,
                                       fp8_weight_linear, nvfp4_weight_linear)
from flagos_quant.quantize import quantize_fp8_blocks, quantize_nvfp4
from quant_testing import assert_matches_cpu

assert torch.flagos.get_device_properties(0).twin_device == "none"
assert flagos.routing.providers()["quant-triton"].unavailable_on("cuda") is None
g = torch.Generator().manual_seed(0)
qb, sb = quantize_fp8_blocks(torch.randn(256, 256, generator=g), (128, 128))
packed, scale, glob = quantize_nvfp4(torch.randn(256, 256, generator=g))
on = lambda *ts: [t.to("flagos") for t in ts]
before = launch_cache.stats()
for m in (1, 1, 1, 8, 40):
    x = torch.randn(m, 256, generator=g).bfloat16()
    bias = torch.randn(256, generator=g).bfloat16()
    assert_matches_cpu(fp8_weight_linear(*on(x, qb, sb), (128, 128), bias.to("flagos")),
                       fp8_weight_linear(x, qb, sb, (128, 128), bias))
    assert_matches_cpu(nvfp4_weight_linear(*on(x, packed, scale, glob), None),
                       nvfp4_weight_linear(x, packed, scale, glob, None))
stats = flagos.routing.stats()
for op in (FP8_WEIGHT_LINEAR, NVFP4_WEIGHT_LINEAR):
    assert stats[op]["quant-triton"]["calls"] == 5, stats[op]
after = launch_cache.stats()
# the one-row calls: each op's first kept, the next two relaunched from C++
assert after["relaunched"] - before["relaunched"] >= 4, (before, after)
print("ok")
"""


@pytest.mark.skipif(not GPU, reason="needs the cuda HAL (a GPU)")
def test_on_a_gpu_without_a_twin_the_kernels_match_the_cpu() -> None:
    r = _run(ON_A_GPU_WITHOUT_A_TWIN, FLAGOS_NO_TWIN="1", FLAGOS_HAL="cuda")
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
