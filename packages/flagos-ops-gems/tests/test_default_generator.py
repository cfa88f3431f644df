"""A library kernel that draws from its device's default generator whatever generator it
is given (FlagGems 5.0's multinomial without replacement) draws, through the provider,
from the one it is given: flagos' seed reproduces it, and the default generator is left
as it was (flagos_ops_gems/_default_generator.py). Kernels here run on the CPU twin."""

from __future__ import annotations

from types import MappingProxyType

import flagos
import pytest
import torch
from flagos_ops_gems import KernelLibrary, register_library
from flagos_ops_gems._default_generator import draws_from_given_generator

OP = "aten::multinomial"


def _ignores_gen(prob, n_samples, with_replacement=False, *, gen=None):
    q = torch.empty_like(prob).exponential_(1.0)  # the device's default generator
    return torch.topk(prob / q, n_samples, dim=-1).indices


def test_the_given_generator_is_drawn_from_and_advanced() -> None:
    prob = torch.rand(4, 50)
    kernel = draws_from_given_generator(_ignores_gen)
    g = torch.Generator().manual_seed(11)
    before = torch.default_generator.get_state()
    got = kernel(prob, 5, gen=g)
    assert torch.equal(torch.default_generator.get_state(), before)
    after = g.get_state()
    torch.default_generator.manual_seed(11)  # what drawing from g means
    want = _ignores_gen(prob, 5)
    assert torch.equal(got, want)
    assert torch.equal(after, torch.default_generator.get_state())  # g advanced as drawn
    torch.default_generator.manual_seed(2)  # no generator given: the kernel as it is
    unchanged = kernel(prob, 5)
    torch.default_generator.manual_seed(2)
    assert torch.equal(unchanged, _ignores_gen(prob, 5))
    torch.default_generator.set_state(before)


@pytest.fixture
def provider():
    class Library(KernelLibrary):
        name = "defaultgen"
        keyword_aliases = MappingProxyType({"generator": "gen"})

        def load(self):
            return {OP: draws_from_given_generator(_ignores_gen)}, frozenset({"cpu", "cuda"})

    flagos.routing.register_provider(register_library("defaultgen", Library()))
    flagos.routing.reset_stats()
    with flagos.routing.override({OP: ["defaultgen", "boxing", "cpu"]}):
        yield "defaultgen"


def test_multinomial_follows_flagos_seed(provider) -> None:
    prob = torch.rand(4, 50).to("flagos")
    torch.flagos.manual_seed(5)
    first, second = torch.multinomial(prob, 5).cpu(), torch.multinomial(prob, 5).cpu()
    cpu_state = torch.default_generator.get_state()
    torch.flagos.manual_seed(5)  # flagos' seed alone reproduces the draws
    assert torch.equal(torch.multinomial(prob, 5).cpu(), first)
    assert not torch.equal(first, second)
    assert torch.equal(torch.default_generator.get_state(), cpu_state)
    g = torch.Generator(device="flagos")
    g.manual_seed(3)
    mine = torch.multinomial(prob, 5, generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.multinomial(prob, 5, generator=g).cpu(), mine)
    assert flagos.routing.stats()[OP][provider]["calls"] == 5
