"""The fused kernels (RMS norm, attention) through the native provider on opaque memory:
rms_norm and scaled_dot_product_attention reach simk as _fused_rms_norm and the overrideable
fused attention, forward and backward, and match the CPU; calls simk does not take are
computed from other ops (flagos-core's fused_ops.cpp) and match too."""

from __future__ import annotations

import flagos
import pytest
import torch
import torch.nn.functional as F
from route_stats import calls as _calls
from route_stats import declined as _declined

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3),
       torch.float64: (1e-7, 1e-7)}
RMS = "aten::_fused_rms_norm"
RMS_BW = "aten::_fused_rms_norm_backward"
SDPA = "aten::_scaled_dot_product_fused_attention_overrideable"
SDPA_BW = "aten::_scaled_dot_product_fused_attention_overrideable_backward"


def _run_both(fn, tensors, dtype, grad_scale=10):
    """fn on CPU tensors and on flagos copies, forward and backward: same results and
    gradients. Returns nothing; the caller checks who served the calls."""
    rtol, atol = TOL[dtype]
    dev = [t.detach().to("flagos").requires_grad_(t.requires_grad) for t in tensors]
    ref_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    flagos.routing.reset_stats()
    out = fn(*dev)
    ref = fn(*ref_in)
    torch.testing.assert_close(out.cpu(), ref, rtol=rtol, atol=atol)
    g = torch.randn_like(ref)
    out.backward(g.to("flagos"))
    ref.backward(g)
    for a, b in zip(dev, ref_in):
        if b.requires_grad:
            torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=rtol * grad_scale,
                                       atol=atol * grad_scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_fused_forward_backward(native_first, dtype, weighted):
    x = torch.randn(3, 5, 16, dtype=dtype, requires_grad=True)
    w = torch.randn(16, dtype=dtype, requires_grad=True)
    args = [x, w] if weighted else [x]
    _run_both(lambda x, *w: F.rms_norm(x, (16,), *w, eps=1e-6), args, dtype)
    assert _calls(RMS, "native") == 1 and _calls(RMS_BW, "native") == 1, flagos.routing.stats()
    # the decomposition's ops never ran
    assert _calls("aten::pow.Tensor_Scalar_out", "native") + \
        _calls("aten::pow.Tensor_Scalar_out", "cpu") == 0


def test_rms_norm_default_eps_and_two_dims(native_first):
    x = torch.randn(4, 6, 8, requires_grad=True)
    w = torch.randn(6, 8, requires_grad=True)
    _run_both(lambda x, w: F.rms_norm(x, (6, 8), w), [x, w], torch.float32)
    assert _calls(RMS, "native") == 1 and _calls(RMS_BW, "native") == 1


def test_rms_norm_declined_is_computed_from_other_ops(native_first):
    """float64 is not a simk dtype: native declines both ops, which flagos then computes
    from other ops (the CPU build of torch has no kernel for the backward)."""
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    _run_both(lambda x, w: F.rms_norm(x, (8,), w), [x, w], torch.float64)
    assert _declined(RMS, "native") == 1 and _declined(RMS_BW, "native") == 1
    assert _calls(RMS, "native") == 0


def test_rms_norm_without_kernel_provider_decomposes():
    """With only the CPU fallback in the route, rms_norm decomposes as torch does."""
    x = torch.randn(3, 8)
    with flagos.routing.override({"default": ["cpu"]}):
        flagos.routing.reset_stats()
        out = F.rms_norm(x.to("flagos"), (8,))
        assert _calls(RMS, "cpu") == 0 and _calls("aten::rsqrt.out", "cpu") >= 1
    torch.testing.assert_close(out.cpu(), F.rms_norm(x, (8,)))


def test_rms_norm_no_grad_and_inference_mode(native_first):
    """No autograd graph is needed: under no_grad and inference mode the fused op serves."""
    x, w = torch.randn(2, 8), torch.randn(8)
    with torch.no_grad():
        out = F.rms_norm(x.to("flagos"), (8,), w.to("flagos"))
    torch.testing.assert_close(out.cpu(), F.rms_norm(x, (8,), w), rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        out = F.rms_norm(x.to("flagos"), (8,), w.to("flagos"))
    torch.testing.assert_close(out.cpu(), F.rms_norm(x, (8,), w), rtol=1e-5, atol=1e-5)
    assert _calls(RMS, "native") == 2


def _qkv(dtype, b=2, hq=4, hk=4, lq=5, lk=7, e=8, ev=8):
    q = torch.randn(b, hq, lq, e, dtype=dtype, requires_grad=True)
    k = torch.randn(b, hk, lk, e, dtype=dtype, requires_grad=True)
    v = torch.randn(b, hk, lk, ev, dtype=dtype, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_attention_fused_forward_backward(native_first, dtype):
    _run_both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), list(_qkv(dtype)), dtype)
    assert _calls(SDPA, "native") == 1 and _calls(SDPA_BW, "native") == 1, flagos.routing.stats()
    assert _calls("aten::bmm.out", "native") == 0  # the math decomposition did not run


@pytest.mark.parametrize("case", ["causal", "scale", "bool_mask", "float_mask", "gqa",
                                  "strided", "value_dim"])
def test_attention_variants(native_first, case):
    kw: dict = {}
    shape: dict = {}
    mask = None
    if case == "causal":
        kw["is_causal"] = True
        shape = {"lq": 6, "lk": 6}
    elif case == "scale":
        kw["scale"] = 0.3
    elif case == "gqa":
        kw["enable_gqa"] = True
        shape = {"hq": 4, "hk": 2}
    elif case == "value_dim":
        shape = {"ev": 3}
    q, k, v = _qkv(torch.float32, **shape)
    if case == "bool_mask":
        mask = torch.rand(5, 7) > 0.3
        mask[:, 0] = True
    elif case == "float_mask":
        mask = torch.randn(2, 1, 5, 7)
    if case == "strided":
        def fn(q, k, v):
            return F.scaled_dot_product_attention(q.transpose(1, 2).transpose(1, 2), k, v)
    else:
        def fn(q, k, v):
            m = None if mask is None else mask.to(q.device)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)
    _run_both(fn, [q, k, v], torch.float32)
    assert _calls(SDPA, "native") == 1 and _calls(SDPA_BW, "native") == 1, flagos.routing.stats()


def test_attention_dropout_takes_math(native_first):
    """Dropout is not a fused kernel's: flagos' choice is torch's math decomposition."""
    q, k, v = (t.detach().to("flagos") for t in _qkv(torch.float32))
    F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert _calls(SDPA, "native") == 0 and _calls(SDPA, "cpu") == 0


def test_attention_declined_is_computed_from_other_ops(native_first):
    """float64 is not a simk dtype: the fused op is computed from other ops, with its
    backward, including a float mask's gradient."""
    q, k, v = _qkv(torch.float64)
    mask = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    _run_both(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                is_causal=False),
              [q, k, v, mask], torch.float64)
    assert _declined(SDPA, "native") == 1 and _declined(SDPA_BW, "native") == 1
