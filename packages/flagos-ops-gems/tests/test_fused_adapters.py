"""The adapters that serve aten::_fused_rms_norm and its backward with FlagGems' RMS norm
kernels, checked on CPU with kernels of FlagGems' signatures written in torch: results
and shapes as ATen's own ``_fused_rms_norm`` gives them, and declines where FlagGems'
kernels do not apply; and FlagGems' layer norm statistics in ATen's shape."""

from __future__ import annotations

import types

import pytest
import torch
from flagos_ops_gems._fused_adapters import fused_kernels, layer_norm_statistics_as_aten


def _forward(x, normalized_shape, weight, eps=1e-5):  # FlagGems' contract: inv_rms is [M]
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    inv = torch.rsqrt(x.float().pow(2).mean(dims, keepdim=True) + eps)
    return (x.float() * inv * weight.float()).to(x.dtype), inv.reshape(-1)


def _backward(dy, x, inv_rms, normalized_shape, weight, eps=1e-5):
    n = len(normalized_shape)
    dims = tuple(range(x.dim() - n, x.dim()))
    inv = inv_rms.view(*x.shape[:x.dim() - n], *([1] * n))
    xh, g = x.float() * inv, dy.float() * weight.float()
    dx = inv * (g - xh * (g * xh).mean(dims, keepdim=True))
    dw = (dy.float() * xh).sum(tuple(range(x.dim() - n)))
    return dx.to(x.dtype), dw.to(weight.dtype)


@pytest.fixture
def kernels():
    return fused_kernels(types.SimpleNamespace(
        ops=types.SimpleNamespace(rms_norm_forward=_forward, rms_norm_backward=_backward)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_forward_matches_aten(kernels, dtype, eps) -> None:
    x = torch.randn(3, 5, 16, dtype=dtype)
    w = torch.randn(16, dtype=dtype)
    y, rstd = kernels["aten::_fused_rms_norm"](x, [16], w, eps)
    y_ref, rstd_ref = torch._fused_rms_norm(x, [16], w, eps)
    assert rstd.shape == rstd_ref.shape and rstd.dtype == rstd_ref.dtype
    torch.testing.assert_close(rstd, rstd_ref)
    torch.testing.assert_close(y, y_ref)


@pytest.mark.parametrize("mask", [(True, True), (True, False), (False, True)])
def test_backward_matches_aten_and_honours_the_mask(kernels, mask) -> None:
    x = torch.randn(2, 3, 8, 16)
    w = torch.randn(8, 16)
    dy = torch.randn_like(x)
    _, rstd = torch._fused_rms_norm(x, [8, 16], w, None)
    got = kernels["aten::_fused_rms_norm_backward"](dy, x, [8, 16], rstd, w, list(mask))
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.nn.functional.rms_norm(xr, (8, 16), wr).backward(dy)  # decomposed on CPU
    ref = (xr.grad, wr.grad)
    for want, g, r in zip(mask, got, ref):
        if want:
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
        else:
            assert g is None


def test_what_the_kernels_do_not_cover_is_declined(kernels) -> None:
    fwd = kernels["aten::_fused_rms_norm"]
    x = torch.randn(4, 16)
    assert fwd(x, [16], None, None) is NotImplemented
    assert fwd(x.double(), [16], torch.randn(16).double(), None) is NotImplemented
    assert fwd(x, [16], torch.randn(16, dtype=torch.bfloat16), None) is NotImplemented


def test_a_flag_gems_without_rms_norm_kernels_adds_nothing() -> None:
    assert fused_kernels(types.SimpleNamespace(ops=types.SimpleNamespace())) == {}


def _flat_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    # FlagGems' contract: the statistics flat, [M]
    out, mean, rstd = torch.native_layer_norm(x, normalized_shape, weight, bias, eps)
    return out, mean.reshape(-1), rstd.reshape(-1)


@pytest.mark.parametrize("shape,normalized", [((3, 5, 16), [16]), ((2, 3, 4, 8), [4, 8]),
                                              ((6, 16), [16])])
def test_layer_norm_statistics_have_atens_shape(shape, normalized) -> None:
    x, w, b = torch.randn(shape), torch.randn(normalized), torch.randn(normalized)
    got = layer_norm_statistics_as_aten(_flat_layer_norm)(x, normalized, w, b, 1e-5)
    want = torch.native_layer_norm(x, normalized, w, b, 1e-5)
    for g, r in zip(got, want, strict=True):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r)


def test_a_declined_layer_norm_stays_declined() -> None:
    declined = layer_norm_statistics_as_aten(lambda *a, **k: NotImplemented)
    assert declined(torch.randn(2, 4), [4]) is NotImplemented
