"""The weight-only packed linear ops (flagos_quant::fp8_weight_linear / nvfp4_weight_linear):
their definition on CPU, routing on flagos (the twin's kernel through boxing, the formula
from routed ops through emulation), gradients, and the Triton kernel that dequantizes in
registers, run under Triton's interpreter on CPU tensors (float32 and float16: the
interpreter's bfloat16 matmul is wrong, so bfloat16 is checked on the GPU only)."""

from __future__ import annotations

import os

import flagos
import pytest
import torch
import torch.nn.functional as F
from flagos_quant import FP8BlockLinear, dequantize_fp4, dequantize_fp8, quantize_linears
from flagos_quant.fused_linear import (
    FP8_WEIGHT_LINEAR,
    NVFP4_WEIGHT_LINEAR,
    fp8_weight_linear,
    nvfp4_weight_linear,
)
from flagos_quant.quantize import quantize_fp8, quantize_fp8_blocks, quantize_nvfp4
from quant_testing import assert_matches_cpu, calls, exact_hal

DEV = "flagos"


def _fp8_cases(n: int, k: int, seed: int = 0):
    """(name, weight, scale, block) for per-tensor, per-channel and 128x128 blocks."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    q, s = quantize_fp8(w)
    rows = w.abs().amax(1, keepdim=True) / 448
    qc = (w / rows).to(torch.float8_e4m3fn)
    qb, sb = quantize_fp8_blocks(w, (128, 128))
    return [("tensor", q, s, None), ("channel", qc, rows, (1, k)),
            ("block128", qb, sb, (128, 128))]


def _want_fp8(x, q, s, block, bias):
    return F.linear(x, dequantize_fp8(q, s, block).to(x.dtype), bias)


@pytest.mark.parametrize("case", range(3))
def test_fp8_op_is_dequantize_then_linear_on_cpu(case) -> None:
    _, q, s, block = _fp8_cases(200, 272)[case]
    x = torch.randn(3, 5, 272, dtype=torch.bfloat16)
    bias = torch.randn(200, dtype=torch.bfloat16)
    got = fp8_weight_linear(x, q, s, block, bias)
    assert got.shape == (3, 5, 200) and got.dtype == torch.bfloat16
    assert torch.equal(got, _want_fp8(x, q, s, block, bias))


def test_nvfp4_op_is_dequantize_then_linear_on_cpu() -> None:
    w = torch.randn(48, 96)
    packed, scale, glob = quantize_nvfp4(w)
    x = torch.randn(7, 96)
    want = F.linear(x, dequantize_fp4(packed, scale, 16, glob))
    assert torch.equal(nvfp4_weight_linear(x, packed, scale, glob, None), want)


def test_bad_shapes_are_clear_errors() -> None:
    q, s = quantize_fp8(torch.randn(8, 32))
    with pytest.raises(ValueError, match=r"x \[\.\.\., K\] and weight \[N, K\]"):
        fp8_weight_linear(torch.randn(2, 16), q, s, None, None)
    with pytest.raises(ValueError, match=r"not 2-D must be one scale .* block its shape"):
        torch.ops.flagos_quant.fp8_weight_linear(torch.randn(2, 32), q, s, [4, 32], None)
    with pytest.raises(ValueError, match=r"not 2-D must be one scale"):
        torch.ops.flagos_quant.fp8_weight_linear(torch.randn(2, 32), q, torch.ones(8), [8, 32],
                                                 None)
    packed, scale, glob = quantize_nvfp4(torch.randn(8, 32))
    with pytest.raises(ValueError, match="packed weight"):
        nvfp4_weight_linear(torch.randn(2, 16), packed, scale, glob, None)
    for dev in ("cpu", DEV):  # on flagos through its routes too (a provider's error names
        xd, qd = torch.randn(2, 3, 16).to(dev), q.to(dev)  # it), the inputs untouched
        with pytest.raises((ValueError, RuntimeError), match=r"x \[\.\.\., K\] and weight"):
            torch.ops.flagos_quant.fp8_weight_linear(xd, qd, s.to(dev), [8, 32], None)
        assert xd.shape == (2, 3, 16)


def test_leading_dims_and_a_0_dim_scale_on_flagos(stats) -> None:
    """The ops take x [..., K] and, for one scale, a weight_scale of any one-element shape
    (ModelOpt's 0-dim), so the layers reshape nothing; gradients of a bias sum over every
    leading dim."""
    q, s = quantize_fp8(torch.randn(24, 64))
    assert s.dim() == 0
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    bias = torch.randn(24, dtype=torch.bfloat16)
    want = F.linear(x, dequantize_fp8(q, s).to(x.dtype), bias)
    op = torch.ops.flagos_quant.fp8_weight_linear
    for scale in (s, s.reshape(1)):  # ModelOpt's 0-dim, compressed-tensors' [1]
        assert torch.equal(op(x, q, scale, [24, 64], bias), want)
        got = op(x.to(DEV), q.to(DEV), scale.to(DEV), [24, 64], bias.to(DEV))
        assert got.shape == (2, 3, 24)
        assert_matches_cpu(got, want)
    packed, scale, glob = quantize_nvfp4(torch.randn(24, 64))
    x1 = torch.randn(64)
    got4 = nvfp4_weight_linear(x1.to(DEV), packed.to(DEV), scale.to(DEV), glob.to(DEV), None)
    assert got4.shape == (24,)
    assert_matches_cpu(got4, nvfp4_weight_linear(x1, packed, scale, glob, None))
    b = torch.randn(24, requires_grad=True)
    xg = torch.randn(2, 3, 64, requires_grad=True)
    fp8_weight_linear(xg, q, s, None, b).sum().backward()
    torch.testing.assert_close(b.grad, torch.full((24,), 6.0))
    assert xg.grad.shape == xg.shape


@pytest.mark.parametrize("case", range(3))
def test_fp8_op_on_flagos_runs_the_twin_kernel_and_matches_cpu(case, stats) -> None:
    _, q, s, block = _fp8_cases(136, 256, seed=case)[case]
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    bias = torch.randn(136, dtype=torch.bfloat16)
    want = fp8_weight_linear(x, q, s, block, bias)
    got = fp8_weight_linear(x.to(DEV), q.to(DEV), s.to(DEV), block, bias.to(DEV))
    assert got.device.type == DEV
    assert_matches_cpu(got, want)
    served = {p for p in ("native", "boxing", "emulation", "cpu") if calls(FP8_WEIGHT_LINEAR, p)}
    assert served and "cpu" not in served, flagos.routing.stats()


@pytest.mark.parametrize("m", [1, 33])
def test_the_twin_kernels_through_boxing_match_cpu(m, stats) -> None:
    """Routed to boxing, the ops run the twin's kernels: on a CUDA twin the Triton ones
    (bf16 activations), on sim the CPU ones."""
    w = torch.randn(200, 256)
    packed, scale, glob = quantize_nvfp4(w)
    x = torch.randn(m, 256, dtype=torch.bfloat16)
    bias = torch.randn(200, dtype=torch.bfloat16)
    with flagos.routing.override({FP8_WEIGHT_LINEAR: ["boxing", "cpu"],
                                  NVFP4_WEIGHT_LINEAR: ["boxing", "cpu"]}):
        for _, q, s, block in _fp8_cases(200, 256, seed=m):
            want = fp8_weight_linear(x, q, s, block, bias)
            assert_matches_cpu(fp8_weight_linear(x.to(DEV), q.to(DEV), s.to(DEV), block,
                                                 bias.to(DEV)), want)
        got4 = nvfp4_weight_linear(x.to(DEV), packed.to(DEV), scale.to(DEV), glob.to(DEV),
                                   bias.to(DEV))
    assert_matches_cpu(got4, nvfp4_weight_linear(x, packed, scale, glob, bias))
    assert calls(FP8_WEIGHT_LINEAR, "boxing") == 3
    assert calls(NVFP4_WEIGHT_LINEAR, "boxing") == 1


def test_repeated_one_row_calls_are_relaunched_on_a_cuda_twin(stats) -> None:
    """On a CUDA twin the one-row Triton launch of each layer shape is kept by flagos'
    launch cache after its first call, and repeated from C++ with each call's pointers."""
    from flagos import launch_cache

    q, s = quantize_fp8(torch.randn(96, 128))
    packed, scale, glob = quantize_nvfp4(torch.randn(96, 128))
    qd, sd, pd, scd, gd = (t.to(DEV) for t in (q, s, packed, scale, glob))
    launch_cache.clear()
    before = launch_cache.stats()
    with flagos.routing.override({FP8_WEIGHT_LINEAR: ["boxing", "cpu"],
                                  NVFP4_WEIGHT_LINEAR: ["boxing", "cpu"]}):
        for i in range(4):
            x = torch.randn(1, 1, 128, dtype=torch.bfloat16)
            bias = torch.randn(96, dtype=torch.bfloat16) if i % 2 else None
            assert_matches_cpu(fp8_weight_linear(x.to(DEV), qd, sd, None,
                                                 None if bias is None else bias.to(DEV)),
                               fp8_weight_linear(x, q, s, None, bias))
            assert_matches_cpu(nvfp4_weight_linear(x.to(DEV), pd, scd, gd, None),
                               nvfp4_weight_linear(x, packed, scale, glob, None))
    after = launch_cache.stats()
    if flagos.provider_api.twin_device(0) != "cuda":
        assert after == before  # the CPU twin's kernels are the formula, not launches
        return
    # fp8 with and without bias, nvfp4: three keys, each kept once, the rest relaunched
    assert after["kept"] - before["kept"] == 3
    assert after["relaunched"] - before["relaunched"] == 5


def test_twin_kernels_results_are_declared_factory_allocated() -> None:
    # their CUDA kernels allocate with torch.empty only: through boxing on a CUDA twin the
    # result is made in flagos memory instead of being copied (flagos-core's device results)
    flagos.routing.providers()  # the provider entry points are loaded
    for op in (FP8_WEIGHT_LINEAR, NVFP4_WEIGHT_LINEAR):
        assert flagos.provider_api.device_results_allowed(op)


def test_emulation_serves_where_no_twin_kernel_does(stats) -> None:
    w = torch.randn(64, 128)
    packed, scale, glob = quantize_nvfp4(w)
    q, s = quantize_fp8(w)
    x = torch.randn(2, 128)
    with flagos.routing.override({FP8_WEIGHT_LINEAR: ["emulation", "cpu"],
                                  NVFP4_WEIGHT_LINEAR: ["emulation", "cpu"]}):
        got8 = fp8_weight_linear(x.to(DEV), q.to(DEV), s.to(DEV), None, None)
        got4 = nvfp4_weight_linear(x.to(DEV), packed.to(DEV), scale.to(DEV), glob.to(DEV), None)
    assert calls(FP8_WEIGHT_LINEAR, "emulation") == 1
    assert calls(NVFP4_WEIGHT_LINEAR, "emulation") == 1
    assert_matches_cpu(got8, fp8_weight_linear(x, q, s, None, None))
    assert_matches_cpu(got4, nvfp4_weight_linear(x, packed, scale, glob, None))


def test_gradients_reach_the_activations_and_bias() -> None:
    _, q, s, block = _fp8_cases(32, 64)[2]
    x = torch.randn(3, 64, requires_grad=True)
    bias = torch.randn(32, requires_grad=True)
    fp8_weight_linear(x, q, s, block, bias).square().sum().backward()
    xr = x.detach().clone().requires_grad_()
    br = bias.detach().clone().requires_grad_()
    _want_fp8(xr, q, s, block, br).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(bias.grad, br.grad)
    xf = x.detach().to(DEV).requires_grad_()
    fp8_weight_linear(xf, q.to(DEV), s.to(DEV), block, bias.detach().to(DEV)).square().sum() \
        .backward()
    tol = {} if exact_hal() else {"rtol": 1e-4, "atol": 1e-4}  # a GPU sums in another order
    torch.testing.assert_close(xf.grad.cpu(), xr.grad, **tol)


def test_weight_only_layers_use_the_ops(stats) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 16, bias=False))
    x = torch.randn(5, 64)
    for algo, op in (("FP8", FP8_WEIGHT_LINEAR), ("NVFP4", NVFP4_WEIGHT_LINEAR)):
        m = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 16, bias=False))
        m.load_state_dict(model.state_dict())
        quantize_linears(m, algo, skip=())
        for layer in m:
            layer.weight_only = True
        want = m(x)
        got = m.to(DEV)(x.to(DEV))
        assert_matches_cpu(got, want)
        assert sum(calls(op, p) for p in ("native", "boxing", "emulation")) == 2
    blk = FP8BlockLinear(256, 130, weight_only=True)
    qb, sb = quantize_fp8_blocks(torch.randn(130, 256), (128, 128))
    blk.weight.data, blk.weight_scale_inv.data = qb, sb
    xb = torch.randn(3, 256, dtype=torch.bfloat16)
    torch.testing.assert_close(blk(xb), _want_fp8(xb, qb, sb, (128, 128), None), rtol=0, atol=0)


@pytest.fixture
def interpreted():
    """flagos_quant.triton_linear, its kernels made under Triton's interpreter (conftest)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the interpreted kernels run on sim (on a GPU the kernels are compiled)")
    from flagos_quant import triton_linear

    return triton_linear


TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-4}, torch.float16: {"rtol": 2e-3, "atol": 2e-2}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m", [1, 19])
def test_triton_fp8_kernel_matches_the_definition(interpreted, dtype, m) -> None:
    for name, q, s, block in _fp8_cases(136, 160, seed=m):
        x = torch.randn(m, 160).to(dtype)
        bias = torch.randn(136).to(dtype)
        blk = block or (136, 160)
        got = interpreted.fp8_linear(x, q, s.reshape(1, 1) if block is None else s, list(blk),
                                     bias)
        assert got is not None, name
        want = _want_fp8(x.float(), q, s, block, bias.float())
        torch.testing.assert_close(got.float(), want, **TOL[dtype], msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m", [1, 3])
def test_triton_nvfp4_kernel_matches_the_definition(interpreted, dtype, m) -> None:
    w = torch.randn(40, 96)
    packed, scale, glob = quantize_nvfp4(w)
    x = torch.randn(m, 96).to(dtype)
    got = interpreted.nvfp4_linear(x, packed, scale, glob, None)
    want = F.linear(x.float(), dequantize_fp4(packed, scale, 16, glob).to(dtype).float())
    torch.testing.assert_close(got.float(), want, **TOL[dtype])


def test_triton_declines_what_it_does_not_take(interpreted) -> None:
    q, s = quantize_fp8(torch.randn(8, 32))
    assert interpreted.fp8_linear(torch.randn(2, 32).double(), q, s.reshape(1, 1), [8, 32],
                                  None) is None
    # scale blocks narrower than a K-tile (which holds one scale per column)
    qb, sb = quantize_fp8_blocks(torch.randn(8, 192), (8, 48))
    assert interpreted.fp8_linear(torch.randn(2, 192), qb, sb, [8, 48], None) is None


@pytest.mark.parametrize("tile", [(4, 256, 4, 2), (1, 128, 4, 2), (8, 64, 4, 2)])
def test_triton_one_row_kernels_match_for_every_tile_shape(interpreted, tile) -> None:
    # K = 384: tiles wider than, equal to and narrower than a 128-wide scale block, and a
    # last tile that runs past K
    for name, q, s, block in _fp8_cases(24, 384, seed=5):
        x = torch.randn(1, 384)
        with interpreted.gemv_tile(*tile):
            got = interpreted.fp8_linear(x, q, s.reshape(1, 1) if block is None else s,
                                         list(block or (24, 384)), None)
        torch.testing.assert_close(got, _want_fp8(x, q, s, block, None), **TOL[torch.float32],
                                   msg=name)
    packed, scale, glob = quantize_nvfp4(torch.randn(24, 384))
    x = torch.randn(1, 384)
    with interpreted.gemv_tile(*tile):
        got = interpreted.nvfp4_linear(x, packed, scale, glob, None)
    want = F.linear(x, dequantize_fp4(packed, scale, 16, glob))
    torch.testing.assert_close(got, want, **TOL[torch.float32])


def test_autograd_is_kept_whenever_a_tensor_argument_requires_grad() -> None:
    # without a gradient to flow the wrappers call the op below autograd's key
    q, s = quantize_fp8(torch.randn(8, 16))
    x = torch.randn(2, 16)
    assert fp8_weight_linear(x, q, s, None, None).grad_fn is None
    assert fp8_weight_linear(x, q, s.clone().requires_grad_(), None, None).grad_fn is not None
    assert fp8_weight_linear(x.requires_grad_(), q, s, None, None).grad_fn is not None
    with torch.no_grad():
        assert fp8_weight_linear(x, q, s, None, None).grad_fn is None
    with pytest.raises(RuntimeError):
        fp8_weight_linear(x, q, torch.ones(8, 1), None, None)  # block=None: one scale
