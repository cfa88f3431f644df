"""An MLP, a small transformer and a conv net compile with the default backend on flagos
(sim), and a training step (forward, backward through AOTAutograd, SGD) matches eager
flagos and eager CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import assert_close
from flagos_compile.models import MLP, ConvNet, TinyTransformer

CASES = {
    "mlp": (MLP, lambda: torch.randn(8, 32)),
    "transformer": (TinyTransformer, lambda: torch.randint(0, 50, (2, 10))),
    "convnet": (ConvNet, lambda: torch.randn(2, 3, 16, 16)),
}


def train_step(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(x)
    loss = out.float().pow(2).mean()
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    opt.step()
    return out, grads


@pytest.mark.parametrize("name", list(CASES))
def test_train_step_matches_eager(name: str) -> None:
    torch.manual_seed(0)
    make, inputs = CASES[name]
    cpu_model = make()
    x = inputs()
    flagos_eager = copy.deepcopy(cpu_model).to("flagos")
    flagos_compiled = copy.deepcopy(cpu_model).to("flagos")

    ref_out, ref_grads = train_step(cpu_model, x)
    eager_out, eager_grads = train_step(flagos_eager, x.to("flagos"))
    out, grads = train_step(torch.compile(flagos_compiled), x.to("flagos"))

    assert out.device.type == "flagos"
    assert all(g.device.type == "flagos" for g in grads)
    tol = {"rtol": 1e-4, "atol": 1e-5}
    assert_close(out, ref_out, **tol)
    assert_close(out, eager_out, **tol)
    for g, r, e in zip(grads, ref_grads, eager_grads, strict=True):
        assert_close(g, r, **tol)
        assert_close(g, e, **tol)
    for p, r in zip(flagos_compiled.parameters(), cpu_model.parameters(), strict=True):
        assert p.device.type == "flagos"
        assert_close(p, r, **tol)
    # one Dynamo graph, no graph breaks, in models that have none
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
