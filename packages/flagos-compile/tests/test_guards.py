"""Recompilation happens only when it should, and a graph break keeps results right."""

from __future__ import annotations

import torch
from conftest import assert_close
from torch._dynamo.testing import CompileCounterWithBackend


def f(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).relu() + x.mean()


def test_same_shape_no_recompile_new_dtype_recompiles() -> None:
    cnt = CompileCounterWithBackend("inductor")
    c = torch.compile(f, backend=cnt, dynamic=False)
    x = torch.randn(4, 8, device="flagos")
    for _ in range(3):
        assert_close(c(x), f(x.cpu()))
    assert cnt.frame_count == 1
    c(torch.randn(4, 8, device="flagos"))  # new values, same shape/dtype/device
    assert cnt.frame_count == 1
    xd = x.double()
    assert_close(c(xd), f(xd.cpu()))  # new dtype: the dtype guard fails
    assert cnt.frame_count == 2
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2


def test_dynamic_shapes_no_recompile() -> None:
    cnt = CompileCounterWithBackend("inductor")
    c = torch.compile(f, backend=cnt, dynamic=True)
    for n in (3, 5, 11):
        x = torch.randn(n, 7, device="flagos")
        out = c(x)
        assert out.device.type == "flagos"
        assert_close(out, f(x.cpu()))
    assert cnt.frame_count == 1


def test_graph_break_in_the_middle() -> None:
    def g(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(x @ w)
        print("graph break here")
        return (y * y).sum(dim=0) + y.max()

    cnt = CompileCounterWithBackend("inductor")
    c = torch.compile(g, backend=cnt)
    x = torch.randn(6, 5, device="flagos", requires_grad=True)
    w = torch.randn(5, 5, device="flagos")
    out = c(x, w)
    assert cnt.frame_count == 2  # one graph on each side of the break
    assert torch._dynamo.utils.counters["graph_break"]
    xc = x.detach().cpu().requires_grad_()
    ref = g(xc, w.cpu())
    assert out.device.type == "flagos"
    assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    assert_close(x.grad, xc.grad, rtol=1e-5, atol=1e-5)
