"""The sim kernel library (simk) through the native provider, on opaque memory: every
result matches the CPU, and the call was served by native (not the fallback)."""

from __future__ import annotations

import flagos
import pytest
import torch
import torch.nn.functional as F
from route_stats import calls as _calls
from route_stats import declined as _declined

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3),
       torch.float64: (1e-12, 1e-12)}


def _check(fn, *cpu_args, dtype, served: list[str], grad: bool = False):
    """fn on CPU tensors and on flagos copies: same results (and input gradients)."""
    rtol, atol = TOL[dtype]
    dev = [a.to("flagos").requires_grad_(grad and a.is_floating_point()) if
           isinstance(a, torch.Tensor) else a for a in cpu_args]
    ref_in = [a.clone().requires_grad_(grad and a.is_floating_point()) if
              isinstance(a, torch.Tensor) else a for a in cpu_args]
    flagos.routing.reset_stats()
    out = fn(*dev)
    ref = fn(*ref_in)
    torch.testing.assert_close(out.cpu(), ref, rtol=rtol, atol=atol)
    if grad:
        g = torch.randn_like(ref)
        out.backward(g.to("flagos"))
        ref.backward(g)
        for a, b in zip(dev, ref_in):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=rtol * 10, atol=atol * 10)
    for op in served:
        assert _calls(op, "native") > 0, (op, flagos.routing.stats())
        assert _calls(op, "cpu") == 0, (op, flagos.routing.stats())


UNARY = ["neg", "exp", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs",
         "reciprocal", "log"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary(native_first, name, dtype):
    x = torch.rand(5, 7, dtype=dtype) + 0.1 if name in ("sqrt", "rsqrt", "log") else \
        torch.randn(5, 7, dtype=dtype)
    op = f"aten::{name}" if name == "relu" else f"aten::{name}.out"
    _check(getattr(torch, name), x, dtype=dtype, served=[op])
    # a transposed (strided) input, and the in-place form
    _check(lambda t: getattr(torch, name)(t.t()), x, dtype=dtype, served=[op])
    y = x.to("flagos")
    getattr(y, name + "_")()
    torch.testing.assert_close(y.cpu(), getattr(torch, name)(x), rtol=TOL[dtype][0],
                               atol=TOL[dtype][1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_binary_broadcast_alpha_out_inplace(native_first, dtype):
    a, b = torch.randn(4, 1, 6, dtype=dtype), torch.randn(3, 1, dtype=dtype)
    _check(lambda x, y: torch.add(x, y, alpha=0.5), a, b, dtype=dtype, served=["aten::add.out"])
    _check(torch.sub, a, b, dtype=dtype, served=["aten::sub.out"])
    _check(torch.mul, a, b, dtype=dtype, served=["aten::mul.out"])
    _check(torch.div, a, b, dtype=dtype, served=["aten::div.out"])
    _check(torch.maximum, a, b, dtype=dtype, served=["aten::maximum.out"])
    _check(torch.minimum, a, b, dtype=dtype, served=["aten::minimum.out"])
    x, y = torch.randn(3, 5, dtype=dtype), torch.randn(5, dtype=dtype)
    dx = x.to("flagos")
    dx.add_(y.to("flagos"), alpha=2)
    torch.testing.assert_close(dx.cpu(), x.add(y, alpha=2), rtol=TOL[dtype][0], atol=TOL[dtype][1])
    out = torch.empty(0, dtype=dtype, device="flagos")
    torch.mul(x.to("flagos"), y.to("flagos"), out=out)  # resized from empty
    torch.testing.assert_close(out.cpu(), x * y, rtol=TOL[dtype][0], atol=TOL[dtype][1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_activations_backward(native_first, dtype):
    x = torch.randn(6, 9, dtype=dtype)
    _check(F.silu, x, dtype=dtype, grad=True, served=["aten::silu.out", "aten::silu_backward.grad_input"])
    _check(torch.sigmoid, x, dtype=dtype, grad=True,
           served=["aten::sigmoid_backward.grad_input"])
    _check(torch.tanh, x, dtype=dtype, grad=True, served=["aten::tanh_backward.grad_input"])
    _check(torch.relu, x, dtype=dtype, grad=True, served=["aten::relu",
                                                          "aten::threshold_backward.grad_input"])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reductions(native_first, dtype):
    x = torch.randn(4, 5, 6, dtype=dtype)
    _check(lambda t: t.sum(dim=(0, 2), keepdim=True), x, dtype=dtype,
           served=["aten::sum.IntList_out"])
    _check(lambda t: t.mean(-1), x, dtype=dtype, served=["aten::mean.out"])
    _check(lambda t: t.permute(2, 0, 1).sum(1), x, dtype=dtype, served=["aten::sum.IntList_out"])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matmul_family(native_first, dtype):
    a, b, bias = torch.randn(7, 5, dtype=dtype), torch.randn(5, 3, dtype=dtype), torch.randn(3, dtype=dtype)
    _check(torch.mm, a, b, dtype=dtype, grad=True, served=["aten::mm.out"])
    _check(lambda x, y: torch.mm(x.t().contiguous().t(), y.t().contiguous().t()), a, b,
           dtype=dtype, served=["aten::mm.out"])
    _check(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0), bias, a, b, dtype=dtype,
           served=["aten::addmm.out"])
    _check(F.linear, a, b.t(), bias, dtype=dtype, grad=True, served=["aten::addmm.out"])
    x, y = torch.randn(2, 4, 5, dtype=dtype), torch.randn(2, 5, 3, dtype=dtype)
    _check(torch.bmm, x, y, dtype=dtype, grad=True, served=["aten::bmm.out"])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_norm_embedding(native_first, dtype):
    x = torch.randn(3, 4, 8, dtype=dtype)
    _check(lambda t: torch.softmax(t, -1), x, dtype=dtype, grad=True,
           served=["aten::_softmax.out", "aten::_softmax_backward_data.out"])
    _check(lambda t: torch.log_softmax(t, 1), x, dtype=dtype, grad=True,
           served=["aten::_log_softmax.out", "aten::_log_softmax_backward_data.out"])
    w, b = torch.randn(8, dtype=dtype), torch.randn(8, dtype=dtype)
    _check(lambda t, ww, bb: F.layer_norm(t, (8,), ww, bb), x, w, b, dtype=dtype, grad=True,
           served=["aten::native_layer_norm", "aten::native_layer_norm_backward"])
    weight, idx = torch.randn(10, 4, dtype=dtype), torch.tensor([[1, 3, 3], [0, 9, 1]])
    # embedding's composite kernel calls index_select, unless an installed library has
    # embedding routed as itself (flagos-ops-gems does): then it reaches the chain whole,
    # which simk does not serve (docs/routing.md)
    whole = torch._C._dispatch_has_kernel_for_dispatch_key("aten::embedding", "PrivateUse1")
    _check(lambda ww, i: F.embedding(i, ww), weight, idx, dtype=dtype, grad=True,
           served=["aten::embedding_dense_backward"] + ([] if whole else ["aten::index_select"]))


def test_unsupported_dtype_declines_to_cpu(native_first):
    """simk's mm has no float64 line: native declines, cpu serves, the result is right."""
    a, b = torch.randn(4, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    out = torch.mm(a.to("flagos"), b.to("flagos"))
    torch.testing.assert_close(out.cpu(), a @ b)
    assert _declined("aten::mm.out", "native") == 1 and _calls("aten::mm.out", "native") == 0
    assert _calls("aten::mm.out", "cpu") == 1
    # mixed dtypes decline too (type promotion is not native's)
    x = torch.randn(3, dtype=torch.float32)
    flagos.routing.reset_stats()
    torch.testing.assert_close((x.to("flagos") + x.double().to("flagos")).cpu(), x + x.double())
    assert _declined("aten::add.out", "native") == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_python_number_operand(native_first, dtype):
    """x * 2.5 (a 0-dim CPU operand) is served: the number moves to the device."""
    x = torch.randn(3, 4, dtype=dtype)
    _check(lambda t: t * 2.5, x, dtype=dtype, served=["aten::mul.out"])
    _check(lambda t: t / 3, x, dtype=dtype, served=["aten::div.out"])
    _check(lambda t: t - torch.tensor(1.5, dtype=torch.float64), x, dtype=dtype,
           served=["aten::sub.out"])


def test_kernels_run_on_the_stream(native_first):
    """simk queues its kernels on the current flagos stream: a side stream's work is
    ordered on it, and results are right after synchronizing."""
    s = torch.flagos.Stream()
    a = torch.randn(64, 64, device="flagos")
    with torch.flagos.stream(s):
        s.wait_stream(torch.flagos.current_stream())
        c = a @ a
    s.synchronize()
    torch.testing.assert_close(c.cpu(), a.cpu() @ a.cpu(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_elementwise_and_sum(native_first, dtype):
    """Integer-valued ops serve int32/int64 exactly (values past float's 24-bit mantissa)."""
    big = 2**40 if dtype == torch.int64 else 2**28
    a = torch.randint(-big, big, (4, 6), dtype=dtype)
    b = torch.randint(-big, big, (6,), dtype=dtype)
    da, db = a.to("flagos"), b.to("flagos")
    flagos.routing.reset_stats()
    for fn, op in ((lambda x, y: torch.add(x, y, alpha=3), "aten::add.out"),
                   (torch.sub, "aten::sub.out"), (torch.mul, "aten::mul.out"),
                   (torch.maximum, "aten::maximum.out"), (torch.minimum, "aten::minimum.out")):
        assert torch.equal(fn(da, db).cpu(), fn(a, b)), op
        assert _calls(op, "native") >= 1 and _calls(op, "cpu") == 0, (op, flagos.routing.stats())
    assert torch.equal(torch.neg(da).cpu(), -a) and torch.equal(torch.abs(da).cpu(), a.abs())
    assert torch.equal(torch.relu(da).cpu(), torch.relu(a))
    assert torch.equal((da + 7).cpu(), a + 7)  # an integer Python number
    assert _calls("aten::neg.out", "native") == 1 and _calls("aten::abs.out", "native") == 1
    if dtype == torch.int64:  # torch sums int32 into int64: a promotion, which declines
        assert torch.equal(da.sum(1).cpu(), a.sum(1))
        assert _calls("aten::sum.IntList_out", "native") == 1


def test_integer_promotions_decline(native_first):
    """Integer ops whose result is another dtype fall through and are right."""
    a = torch.randint(-50, 50, (5,), dtype=torch.int32)
    da = a.to("flagos")
    flagos.routing.reset_stats()
    torch.testing.assert_close((da * 0.5).cpu(), a * 0.5)       # int * float number -> float
    torch.testing.assert_close((da / 3).cpu(), a / 3)           # true division -> float
    assert torch.equal(da.sum().cpu(), a.sum())                 # int32 sum -> int64
    torch.testing.assert_close(torch.exp(da).cpu(), torch.exp(a))  # exp of int -> float
    assert torch.equal((da + da.long()).cpu(), a + a.long())    # int32 + int64 -> int64
    stats = flagos.routing.stats()
    served = [op for op, row in stats.items() if row.get("native", {}).get("calls")]
    assert not served, served


def test_float64_elementwise_and_reductions(native_first):
    """float64 is computed in double (not narrowed to float)."""
    x = torch.randn(5, 7, dtype=torch.float64)
    y = torch.randn(7, dtype=torch.float64)
    _check(lambda a, b: torch.exp(a) * b + 1e-12, x, y, dtype=torch.float64,
           served=["aten::exp.out", "aten::mul.out", "aten::add.out"])
    _check(lambda a: a.sum(0) / a.mean(1, keepdim=True), x, dtype=torch.float64,
           served=["aten::sum.IntList_out", "aten::mean.out", "aten::div.out"])
    _check(lambda a: torch.sigmoid(a), x, dtype=torch.float64, served=["aten::sigmoid.out"],
           grad=True)
