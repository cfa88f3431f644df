"""Emulated scaled matmul: every scale layout equals dequantize-then-matmul in the output
dtype, on flagos through the routed ATen ops, and agrees with torch's own CPU kernel where
that kernel exists (tensorwise, rowwise)."""

from __future__ import annotations

import flagos
import pytest
import torch
import torch.nn.functional as F
from flagos_quant.dequant import dequantize_fp4, dequantize_fp8
from flagos_quant.quantize import quantize_fp8, quantize_fp8_blocks, quantize_nvfp4
from flagos_quant.scaled_mm import emulated_scaled_mm
from flagos_quant.scales import to_blocked
from quant_testing import assert_matches_cpu, calls

FP4 = torch.float4_e2m1fn_x2
M, K, N = 5, 256, 192


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _reference(da: torch.Tensor, db_t: torch.Tensor, out_dtype=torch.bfloat16, bias=None):
    """mm of the dequantized operands ([M, K] and [N, K], float32) in the output dtype."""
    out = torch.mm(da.to(out_dtype), db_t.to(out_dtype).t())
    return out if bias is None else out + bias.to(out_dtype)


def _close_to_native(native: torch.Tensor, want: torch.Tensor) -> None:
    """torch's CPU kernel multiplies the exact FP8 products in float32; the emulation
    rounds the dequantized operands to bf16 first: within 1% of the largest output."""
    err = (native.float() - want.float()).abs().max().item()
    assert err <= 1e-2 * want.float().abs().max().item(), err


def _flagos(*ts):
    return [t.to("flagos") if isinstance(t, torch.Tensor) else t for t in ts]


def _check_v1(a, b, sa, sb, want, bias=None, out_dtype=torch.bfloat16):
    """The emulation on CPU and torch._scaled_mm on flagos (served by emulation) both give
    exactly ``want``."""
    got_cpu = emulated_scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    assert torch.equal(got_cpu, want)
    fa, fb, fsa, fsb, fbias = _flagos(a, b, sa, sb, bias)
    got = torch._scaled_mm(fa, fb, fsa, fsb, bias=fbias, out_dtype=out_dtype)
    assert got.device.type == "flagos" and got.dtype == out_dtype
    assert_matches_cpu(got, want)


def test_tensorwise_matches_rule_and_torch_cpu_kernel(stats) -> None:
    a, sa = quantize_fp8(_rand(M, K))
    w, sw = quantize_fp8(_rand(N, K, seed=1))
    bias = _rand(N, seed=2).bfloat16()
    want = _reference(dequantize_fp8(a, sa), dequantize_fp8(w, sw), bias=bias)
    _check_v1(a, w.t(), sa, sw, want, bias=bias)
    assert calls("aten::_scaled_mm", "emulation") == 1
    _close_to_native(torch._scaled_mm(a, w.t(), sa, sw, bias=bias, out_dtype=torch.bfloat16),
                     want)


def test_rowwise_matches_rule_and_torch_cpu_kernel() -> None:
    x, wf = _rand(M, K), _rand(N, K, seed=1)
    sa = x.abs().amax(1, keepdim=True) / 448
    sw = wf.abs().amax(1, keepdim=True) / 448  # [N, 1]; b's scale is [1, N]
    a = (x / sa).to(torch.float8_e4m3fn)
    w = (wf / sw).to(torch.float8_e4m3fn)
    want = _reference(dequantize_fp8(a, sa, (1, K)), dequantize_fp8(w, sw, (1, K)))
    _check_v1(a, w.t(), sa, sw.t(), want)
    try:
        native = torch._scaled_mm(a, w.t(), sa, sw.t(), out_dtype=torch.bfloat16)
    except RuntimeError as e:  # older torch releases: the CPU kernel is per-tensor only
        assert "only supports per-tensor" in str(e), e
        return
    _close_to_native(native, want)


def test_deepseek_blocks_1x128_activations_128x128_weights() -> None:
    a, sa = quantize_fp8_blocks(_rand(M, K), (1, 128))  # [M, K/128]
    w, sw = quantize_fp8_blocks(_rand(N, K, seed=1))  # [N/128, K/128] (weight_scale_inv)
    want = _reference(dequantize_fp8(a, sa, (1, 128)), dequantize_fp8(w, sw, (128, 128)))
    _check_v1(a, w.t(), sa, sw.t(), want)
    # torch's CPU kernel rejects block scales; the emulation is what runs them
    with pytest.raises((RuntimeError, ValueError),
                       match="Invalid scaling|only supports per-tensor"):
        torch._scaled_mm(a, w.t(), sa, sw.t(), out_dtype=torch.bfloat16)


def test_mxfp8_e8m0_per_32_blocked_layout() -> None:
    g = torch.Generator().manual_seed(3)
    a = _rand(M, K).to(torch.float8_e4m3fn)
    w = _rand(N, K, seed=1).to(torch.float8_e4m3fn)
    ga = torch.randint(120, 134, (M, K // 32), dtype=torch.uint8, generator=g).view(
        torch.float8_e8m0fnu)
    gw = torch.randint(120, 134, (N, K // 32), dtype=torch.uint8, generator=g).view(
        torch.float8_e8m0fnu)
    want = _reference(dequantize_fp8(a, ga, (1, 32)), dequantize_fp8(w, gw, (1, 32)))
    _check_v1(a, w.t(), to_blocked(ga), to_blocked(gw), want)


def test_nvfp4_v1_blocked_and_v2_with_global_scales(stats) -> None:
    pa, sa, ga = quantize_nvfp4(_rand(M, K))
    pw, sw, gw = quantize_nvfp4(_rand(N, K, seed=1))
    da, dw = dequantize_fp4(pa, sa, 16, ga), dequantize_fp4(pw, sw, 16, gw)
    want = _reference(da, dw)
    # v2 (torch.nn.functional.scaled_mm): block scales unswizzled plus the global scales
    recipe = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
    swz = F.SwizzleType.NO_SWIZZLE
    fa, fw, fsa, fga, fsw, fgw = _flagos(pa.view(FP4), pw.view(FP4), sa, ga, sw, gw)
    got = F.scaled_mm(fa, fw.t(), [fsa, fga], recipe, [fsw, fgw], recipe, swz, swz,
                      output_dtype=torch.bfloat16)
    assert_matches_cpu(got, want)
    assert calls("aten::_scaled_mm_v2", "emulation") == 1
    # v1: blocked scales, no global scale (fold it in: compare against da / ga etc.)
    want_v1 = _reference(dequantize_fp4(pa, sa, 16), dequantize_fp4(pw, sw, 16))
    _check_v1(pa.view(FP4), pw.view(FP4).t(), to_blocked(sa), to_blocked(sw), want_v1)


def test_mxfp4_e2m1_with_e8m0_per_32() -> None:
    g = torch.Generator().manual_seed(4)
    pa = torch.randint(0, 256, (M, K // 2), dtype=torch.uint8, generator=g)
    pw = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
    ea = torch.randint(124, 130, (M, K // 32), dtype=torch.uint8, generator=g).view(
        torch.float8_e8m0fnu)
    ew = torch.randint(124, 130, (N, K // 32), dtype=torch.uint8, generator=g).view(
        torch.float8_e8m0fnu)
    want = _reference(dequantize_fp4(pa, ea, 32), dequantize_fp4(pw, ew, 32))
    _check_v1(pa.view(FP4), pw.view(FP4).t(), to_blocked(ea), to_blocked(ew), want)


def test_float32_output() -> None:
    a, sa = quantize_fp8(_rand(M, K))
    w, sw = quantize_fp8(_rand(N, K, seed=1))
    want = _reference(dequantize_fp8(a, sa), dequantize_fp8(w, sw), out_dtype=torch.float32)
    _check_v1(a, w.t(), sa, sw, want, out_dtype=torch.float32)


def test_unsupported_scaling_is_a_clear_error_and_device_stays_usable() -> None:
    a, _ = quantize_fp8(_rand(M, K))
    w, _ = quantize_fp8(_rand(N, K, seed=1))
    fa, fw = _flagos(a, w)
    bad = torch.ones(3, 7, device="flagos")
    with pytest.raises(Exception, match=r"unsupported scaling.*scale \(3, 7\)"):
        torch._scaled_mm(fa, fw.t(), bad, bad, out_dtype=torch.bfloat16)
    assert torch.equal(fa.cpu().view(torch.uint8), a.view(torch.uint8))
    one = torch.ones((), device="flagos")
    assert torch._scaled_mm(fa, fw.t(), one, one, out_dtype=torch.bfloat16).shape == (M, N)


def test_route_to_the_twin_kernel_instead(stats) -> None:
    """A chip with FP8 units routes the op to its own kernel: here the CPU twin's."""
    import flagos

    a, sa = quantize_fp8(_rand(M, K))
    w, sw = quantize_fp8(_rand(N, K, seed=1))
    fa, fw, fsa, fsw = _flagos(a, w, sa, sw)
    with flagos.routing.override({"aten::_scaled_mm": "boxing"}):
        got = torch._scaled_mm(fa, fw.t(), fsa, fsw, out_dtype=torch.bfloat16)
    native = torch._scaled_mm(a, w.t(), sa, sw, out_dtype=torch.bfloat16)
    assert_matches_cpu(got, native)
    assert calls("aten::_scaled_mm", "emulation") == 0


@pytest.mark.skipif(flagos.get_device_properties(0).hal != "sim",
                    reason="the graph's ops run as host tasks on the sim (docs/graphs.md)")
def test_emulated_scaled_mm_is_captured_and_replayed(stats) -> None:
    # emulation is capture-safe: its routed ops are recorded like any other.
    a, sa = quantize_fp8(_rand(M, K))
    w, sw = quantize_fp8(_rand(N, K, seed=1))
    da, dw, dsa, dsw = _flagos(a, w, sa, sw)
    graph = torch.flagos.Graph()
    with torch.flagos.graph(graph):
        out = torch._scaled_mm(da, dw.t(), dsa, dsw, out_dtype=torch.bfloat16)
    assert calls("aten::_scaled_mm", "emulation") == 1
    a2, sa2 = quantize_fp8(_rand(M, K, seed=3))
    da.copy_(a2.to("flagos"))
    dsa.copy_(sa2.to("flagos"))
    graph.replay()
    want = _reference(dequantize_fp8(a2, sa2), dequantize_fp8(w, sw))
    torch.testing.assert_close(out.cpu(), want)
