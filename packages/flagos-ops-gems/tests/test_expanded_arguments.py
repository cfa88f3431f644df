"""Libraries that decline calls with expanded tensor arguments (FlagGems does: see
flagos_ops_gems/_expanded.py): such a call runs on the chain's next provider, every other
call on the library."""

from __future__ import annotations

from types import MappingProxyType

import flagos
import pytest
import torch
from flagos_ops_gems import KernelLibrary, register_library

OP = "aten::mul.Tensor"


def _library(name: str, declines: bool, seen: list) -> KernelLibrary:
    def mul(a, b):
        seen.append((tuple(a.stride()), tuple(b.stride())))
        return torch.mul(a.contiguous(), b)  # on the twin aliases (CPU on sim)

    class Library(KernelLibrary):
        declines_expanded_tensors = declines
        keyword_aliases = MappingProxyType({})

        def load(self):
            return {OP: mul}, frozenset({"cpu", "cuda"})

    lib = Library()
    lib.name = name
    return lib


@pytest.fixture(params=[True, False], ids=["declines", "takes"])
def provider(request):
    declines = request.param
    name = f"expanded{'decl' if declines else 'take'}"
    seen: list = []
    flagos.routing.register_provider(register_library(name, _library(name, declines, seen)))
    flagos.routing.reset_stats()
    with flagos.routing.override({OP: [name, "boxing", "cpu"]}):
        yield name, declines, seen


def _stat(op: str, provider: str, key: str) -> int:
    return flagos.routing.stats().get(op, {}).get(provider, {}).get(key, 0)


def test_expanded_operand_goes_down_the_chain_when_declined(provider) -> None:
    name, declines, seen = provider
    y = torch.randn(4, 8, 64)
    g = torch.full((), 3.0, device="flagos").expand(4, 8, 64)
    assert g.stride() == (0, 0, 0)
    got = g * y.to("flagos")
    torch.testing.assert_close(got.cpu(), 3.0 * y)
    assert _stat(OP, name, "declined") == (1 if declines else 0)
    assert len(seen) == (0 if declines else 1)


def test_dense_and_size_one_broadcast_operands_stay_on_the_library(provider) -> None:
    name, _, seen = provider
    y = torch.randn(4, 8, 64)
    for other in (torch.randn(4, 8, 64), torch.randn(4, 1, 64), torch.randn(())):
        got = other.to("flagos") * y.to("flagos")
        torch.testing.assert_close(got.cpu(), other * y)
    assert _stat(OP, name, "calls") == 3 and len(seen) == 3
    assert _stat(OP, name, "declined") == 0
