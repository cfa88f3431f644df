"""backend="flagos": Inductor that leaves kernel-routed ops to the routing table; and
autocast inside a compiled region."""

from __future__ import annotations

import flagos
import pytest
import torch
from conftest import assert_close
from flagos_compile.models import MLP
from torch._inductor.utils import run_and_get_code


class CountingTanh(flagos.routing.Provider):
    """A Python provider that counts the tanh calls it sees, then declines them (the
    chain goes on to boxing), so results stay exact."""

    name = "test_compile_tanh"
    calls = 0

    def serves(self, op: str) -> bool:
        return op.startswith("aten::tanh")

    def __call__(self, op, args, kwargs):
        CountingTanh.calls += 1
        return NotImplemented


@pytest.fixture(scope="module")
def counting_tanh():
    flagos.routing.register_provider(CountingTanh())
    return CountingTanh


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * 2) + 1


def test_backend_flagos_trains_mlp() -> None:
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(8, 32)
    ref = m(x)
    ref.sum().backward()
    mf = MLP().to("flagos")
    mf.load_state_dict(m.state_dict())
    out = torch.compile(mf, backend="flagos")(x.to("flagos"))
    out.sum().backward()
    assert out.device.type == "flagos"
    assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for p, r in zip(mf.parameters(), m.parameters(), strict=True):
        assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)


def test_backend_flagos_leaves_kernel_routed_ops_to_the_table(counting_tanh) -> None:
    x = torch.randn(16, device="flagos")
    with flagos.routing.override({"aten::tanh": ["test_compile_tanh", "boxing", "cpu"]}):
        counting_tanh.calls = 0
        out, (code, *_) = run_and_get_code(torch.compile(f, backend="flagos"), x)
        assert "torch.ops.flagos_routed.tanh.default" in code
        assert counting_tanh.calls == 1  # the compiled code asked the routing table
        assert_close(out, f(x.cpu()))

        torch._dynamo.reset()
        counting_tanh.calls = 0
        out, (code, *_) = run_and_get_code(torch.compile(f), x)  # default backend
        assert "flagos_routed" not in code and counting_tanh.calls == 0  # fused into C++
        assert_close(out, f(x.cpu()))


class CountingArith(flagos.routing.Provider):
    """Counts the add/mul/sub/div/clamp calls it sees (Python scalars among their
    arguments), then declines them."""

    name = "test_compile_arith"
    calls = 0

    def serves(self, op: str) -> bool:
        return op.split(".")[0] in ("aten::add", "aten::mul", "aten::sub", "aten::div",
                                     "aten::clamp", "aten::pow")

    def __call__(self, op, args, kwargs):
        CountingArith.calls += 1
        return NotImplemented


def g(x: torch.Tensor) -> torch.Tensor:
    return (((x + 1.0) * 2 - 0.5) / 4.0).clamp(min=-0.25).pow(2)


def test_python_scalars_reach_kernel_routed_ops() -> None:
    """x + 1.0 in a compiled graph is aten.add.Tensor with a float where the schema says
    Tensor: the opaque twin that leaves it to the routing table declares it a Scalar."""
    flagos.routing.register_provider(CountingArith())
    x = torch.randn(16, device="flagos")
    route = ["test_compile_arith", "boxing", "cpu"]
    keys = ("aten::add", "aten::mul", "aten::sub", "aten::div", "aten::clamp", "aten::pow")
    with flagos.routing.override(dict.fromkeys(keys, route)):
        CountingArith.calls = 0
        out, (code, *_) = run_and_get_code(torch.compile(g, backend="flagos"), x)
        assert "torch.ops.flagos_routed.add__Tensor__scalar_other.default" in code, code
        assert CountingArith.calls >= 4
        assert_close(out, g(x.cpu()))


def test_backend_flagos_compiles_twin_routed_ops(counting_tanh) -> None:
    # With the shipped routes (boxing) there is nothing to leave out: tanh is fused into a
    # C++ kernel on sim, a Triton kernel on a CUDA twin.
    x = torch.randn(16, device="flagos")
    out, (code, *_) = run_and_get_code(torch.compile(f, backend="flagos"), x)
    twin = torch.flagos.get_device_properties(0).native_device
    assert "flagos_routed" not in code
    assert ('extern "C"' if twin == "cpu" else "async_compile.triton(") in code
    assert_close(out, f(x.cpu()))


def test_autocast_inside_compiled_region() -> None:
    def g(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("flagos", dtype=torch.bfloat16):
            y = torch.mm(a, b)
        return y.relu(), y.float().softmax(-1)

    a = torch.randn(8, 16, device="flagos")
    b = torch.randn(16, 8, device="flagos")
    e_y, e_s = g(a, b)
    c_y, c_s = torch.compile(g)(a, b)
    assert c_y.dtype == e_y.dtype == torch.bfloat16
    assert c_y.device.type == "flagos"
    assert_close(c_y, e_y, rtol=1e-2, atol=1e-2)
    assert_close(c_s, e_s, rtol=1e-2, atol=1e-2)
