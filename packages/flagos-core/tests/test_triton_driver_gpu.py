"""Triton kernels on flagos tensors through the HAL (flagos.triton_driver), where a Triton
backend compiles for the device (the cuda HAL; skipped on sim, which no backend targets):
a @triton.jit kernel compiled for the HAL's target, loaded with module_load and launched
with launch_kernel on the current flagos stream gives what the CPU gives, with a twin and
without one (FLAGOS_NO_TWIN=1, in a child), and a launch-cached op relaunches it from C++.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from flagos import kernels, launch_cache

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

pytestmark = pytest.mark.skipif(
    not kernels.has_kernels(0) or not kernels.target(0).backend,
    reason="no Triton backend compiles for flagos:0 (sim: its kernels are C libraries)")


@triton.jit
def _scale_add(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def _run(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    _scale_add[(triton.cdiv(n, 256),)](x, y, out, alpha, n, BLOCK=256)
    return out


def test_a_triton_kernel_on_flagos_tensors_matches_the_cpu():
    from flagos import triton_driver

    x, y = torch.randn(10_000), torch.randn(10_000)
    with triton_driver.active():
        got = _run(x.to("flagos"), y.to("flagos"), 0.75)
        side = torch.flagos.Stream()
        with torch.flagos.stream(side):
            again = _run(got, y.to("flagos"), 2.0)
        side.synchronize()
    torch.testing.assert_close(got.cpu(), 0.75 * x + y)
    torch.testing.assert_close(again.cpu(), 2.0 * (0.75 * x + y) + y)


def test_a_launch_cached_triton_op_relaunches_from_cpp():
    from flagos import triton_driver

    lib = torch.library.Library("flagos_test_triton_gpu", "DEF")
    lib.define("scale_add(Tensor x, Tensor y, float alpha) -> Tensor")
    launch_cache.register("flagos_test_triton_gpu::scale_add", "flagos", _run)
    try:
        x, y = torch.randn(4096), torch.randn(4096)
        op = torch.ops.flagos_test_triton_gpu.scale_add
        with triton_driver.active():
            before = launch_cache.stats()
            got = [op(x.to("flagos"), y.to("flagos"), 3.0) for _ in range(3)]
            after = launch_cache.stats()
        assert after["relaunched"] - before["relaunched"] == 2, (before, after)
        for g in got:
            torch.testing.assert_close(g.cpu(), 3.0 * x + y)
    finally:
        lib._destroy()


@triton.jit
def _tile_scale(in_desc, out_desc, alpha, BM: tl.constexpr, BN: tl.constexpr):
    at = [tl.program_id(0) * BM, tl.program_id(1) * BN]
    out_desc.store(at, in_desc.load(at) * alpha)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_triton_kernel_with_host_tensor_descriptors_matches_the_cpu(dtype):
    # Host TensorDescriptors: on Hopper and later Triton lowers them to TMA, and the HAL
    # encodes the CUtensorMap; the edge tiles read zeros and store only inside.
    from flagos import triton_driver
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.randn(100, 72).to(dtype)
    fx = x.to("flagos")
    out = torch.full_like(fx, 7.0)
    bm, bn = 32, 32
    with triton_driver.active():
        src = TensorDescriptor(fx, list(fx.shape), list(fx.stride()), [bm, bn])
        dst = TensorDescriptor(out, list(out.shape), list(out.stride()), [bm, bn])
        _tile_scale[(triton.cdiv(100, bm), triton.cdiv(72, bn))](src, dst, 1.5, BM=bm, BN=bn)
    torch.testing.assert_close(out.cpu(), x * 1.5)


def _tile_scale_op(x: torch.Tensor, alpha: float) -> torch.Tensor:
    from triton.tools.tensor_descriptor import TensorDescriptor

    out = torch.empty_like(x)
    bm = bn = 32
    src = TensorDescriptor(x, list(x.shape), list(x.stride()), [bm, bn])
    dst = TensorDescriptor(out, list(out.shape), list(out.stride()), [bm, bn])
    _tile_scale[(triton.cdiv(x.shape[0], bm), triton.cdiv(x.shape[1], bn))](src, dst, alpha,
                                                                            BM=bm, BN=bn)
    return out


def test_a_launch_cached_op_with_tensor_descriptors_relaunches_with_each_calls_tensors():
    # The descriptors hold the tensors' addresses: a relaunch encodes them again from the
    # kept description (a stale one would read the first call's input, kept alive here).
    from flagos import triton_driver

    lib = torch.library.Library("flagos_test_triton_gpu_tma", "DEF")
    lib.define("tile_scale(Tensor x, float alpha) -> Tensor")
    launch_cache.register("flagos_test_triton_gpu_tma::tile_scale", "flagos", _tile_scale_op)
    try:
        xs = [torch.randn(100, 72) for _ in range(3)]
        fxs = [x.to("flagos") for x in xs]
        op = torch.ops.flagos_test_triton_gpu_tma.tile_scale
        with triton_driver.active():
            before = launch_cache.stats()
            got = [op(fx, 1.5) for fx in fxs]
            after = launch_cache.stats()
        assert after["relaunched"] - before["relaunched"] == 2, (before, after)
        for g, x in zip(got, xs):
            torch.testing.assert_close(g.cpu(), x * 1.5)
    finally:
        lib._destroy()


def test_without_a_twin():
    if os.environ.get("FLAGOS_NO_TWIN") == "1":
        pytest.skip("this is the child")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                       env=dict(os.environ, FLAGOS_NO_TWIN="1"), capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-4000:] + r.stderr[-4000:]
