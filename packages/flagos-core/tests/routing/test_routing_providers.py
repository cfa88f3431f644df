"""Provider discovery through a real ``flagos.ops`` entry point (an installed dist-info)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from flagos import routing

MODULE = '''
import torch
from flagos.routing import Provider


class TinyOps(Provider):
    name = "tinyops"
    hals = frozenset({"sim"})

    def serves(self, op):
        return op in {"aten::mm", "aten::add.Tensor"}

    def __call__(self, op, args, kwargs):
        if args[0].dtype != torch.float32:
            return NotImplemented
        return ("tinyops", op(*args, **kwargs))


def make():
    return TinyOps()


instance = TinyOps()
instance.name = "tinyops2"
not_a_provider = object()
'''


@pytest.fixture
def dist(backend, tmp_path: Path, install_distribution) -> Path:
    """A fake installed distribution with a module and four flagos.ops entry points,
    put on sys.path after the table was reset (so it is not discovered yet)."""
    install_distribution("fake-provider", MODULE, """
        [flagos.ops]
        tinyops = {module}:make
        tinyops2 = {module}:instance
        wrong = {module}:not_a_provider
        missing = {module}_nope:thing
        [console_scripts]
        unrelated = {module}:make
        """)
    return tmp_path


def test_entry_point_provider(dist: Path, backend) -> None:
    with pytest.raises(routing.RoutingConfigError, match="unknown provider 'tinyops'"):
        routing.set("aten::mm=tinyops")  # not discovered yet
    with pytest.warns(RuntimeWarning) as caught:
        routing.reset()
    messages = [str(w.message) for w in caught]
    assert any("'wrong'" in m and "not a flagos.routing.Provider" in m for m in messages)
    assert any("'missing'" in m and "ModuleNotFoundError" in m and "fake-provider" in m
               for m in messages), messages
    found = routing.providers()
    assert {"tinyops", "tinyops2", "cpu"} <= set(found)
    assert found["tinyops"].hals == frozenset({"sim"})
    assert set(backend.python) >= {"tinyops", "tinyops2"}  # registered with the core

    routing.set("default=tinyops,cpu")
    assert routing.resolve("aten::mm", 0) == ["tinyops", "cpu"]
    assert routing.resolve("aten::add.Tensor", 0) == ["tinyops", "cpu"]
    assert routing.resolve("aten::mm", 1) == ["cpu"]  # a sim-only provider, device is cuda
    decision = routing.table.decide("aten::mv", "sim")
    assert decision.chain == ("cpu",)
    assert decision.steps[0].reason == "does not serve aten::mv"

    a = torch.ones(2, 2)
    mm = torch.ops.aten.mm.default
    who, (tag, out) = backend.dispatch(mm, (a, a), {}, 0)
    assert (who, tag) == ("tinyops", "tinyops") and torch.equal(out, a @ a)
    who, out = backend.dispatch(mm, (a.double(), a.double()), {}, 0)  # declined: down to cpu
    assert who == "cpu" and torch.equal(out, (a @ a).double())
    assert routing.stats()["aten::mm"]["tinyops"]["declined"] == 1


def test_provider_base_class() -> None:
    with pytest.raises(ValueError, match="has no name"):
        routing.Provider()
    p = routing.Provider("x", hals=["sim"])
    assert p.hals == frozenset({"sim"}) and p.serves("aten::mm")
    assert repr(p) == "<Python provider 'x' on sim>"
    with pytest.raises(NotImplementedError):
        p(torch.ops.aten.mm.default, (), {})
    assert repr(routing.CpuProvider()) == "<C++ provider 'cpu' on all HALs>"
    with pytest.raises(TypeError):
        routing.register_provider(object())  # type: ignore[arg-type]
