"""Default generators per device, seeding, and rng state."""

from __future__ import annotations

import pytest
import torch

F = torch.flagos


def test_torch_manual_seed_reproduces(device0):
    torch.manual_seed(1234)
    a = torch.randn(64, device="flagos").cpu()
    torch.manual_seed(1234)
    b = torch.randn(64, device="flagos").cpu()
    assert torch.equal(a, b)
    torch.manual_seed(4321)
    c = torch.randn(64, device="flagos").cpu()
    assert not torch.equal(a, c)
    assert F.initial_seed() == 4321


def test_flagos_manual_seed_and_all(two_devices, device0):
    F.manual_seed_all(7)
    a0 = torch.rand(16, device="flagos:0").cpu()
    a1 = torch.rand(16, device="flagos:1").cpu()
    F.manual_seed_all(7)
    assert torch.equal(torch.rand(16, device="flagos:0").cpu(), a0)
    assert torch.equal(torch.rand(16, device="flagos:1").cpu(), a1)
    F.manual_seed(9)  # current device only
    assert F.initial_seed() == 9
    with F.device(1):
        assert F.initial_seed() == 7


def test_seed_and_seed_all(device0):
    s = F.seed()
    assert F.initial_seed() == s
    F.seed_all()
    assert len({g.initial_seed() for g in F.default_generators}) == 1


def test_rng_state_round_trip(two_devices, device0):
    state = F.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    x = torch.rand(32, device="flagos").cpu()
    F.set_rng_state(state)
    assert torch.equal(torch.rand(32, device="flagos").cpu(), x)
    states = F.get_rng_state_all()
    assert len(states) == F.device_count()
    y = [torch.randn(8, device=f"flagos:{i}").cpu() for i in range(2)]
    F.set_rng_state_all(states)
    assert all(torch.equal(torch.randn(8, device=f"flagos:{i}").cpu(), y[i]) for i in range(2))
    s1 = F.get_rng_state(1)
    z = torch.rand(4, device="flagos:1").cpu()
    F.set_rng_state(s1, 1)
    assert torch.equal(torch.rand(4, device="flagos:1").cpu(), z)


def test_fork_rng_restores_state(device0):
    torch.manual_seed(3)
    with torch.random.fork_rng(devices=[0], device_type="flagos"):
        torch.rand(100, device="flagos")
    a = torch.rand(4, device="flagos").cpu()
    torch.manual_seed(3)
    assert torch.equal(torch.rand(4, device="flagos").cpu(), a)


def test_explicit_generator(device0):
    g = torch.Generator(device="flagos")
    assert g.device == torch.device("flagos", 0)
    g.manual_seed(11)
    a = torch.rand(10, device="flagos", generator=g).cpu()
    b = torch.rand(10, device="flagos", generator=g).cpu()
    assert not torch.equal(a, b)
    g.manual_seed(11)
    assert torch.equal(torch.rand(10, device="flagos", generator=g).cpu(), a)
    state = g.get_state()
    c = torch.randn(5, device="flagos", generator=g).cpu()
    g.set_state(state)
    assert torch.equal(torch.randn(5, device="flagos", generator=g).cpu(), c)
    # An explicit generator does not disturb the default one.
    torch.manual_seed(5)
    d = torch.rand(3, device="flagos").cpu()
    torch.manual_seed(5)
    torch.rand(3, device="flagos", generator=g)
    assert torch.equal(torch.rand(3, device="flagos").cpu(), d)


def test_generator_on_second_device(two_devices):
    g = torch.Generator(device="flagos:1")
    assert g.device == torch.device("flagos", 1)
    g.manual_seed(2)
    x = torch.rand(4, device="flagos:1", generator=g)
    assert x.device.index == 1


def test_random_ops_use_default_generator(device0):
    torch.manual_seed(0)
    a = (torch.randperm(20, device="flagos").cpu(),
         torch.nn.functional.dropout(torch.ones(50, device="flagos"), 0.5).cpu(),
         torch.empty(10, device="flagos").uniform_().cpu())
    torch.manual_seed(0)
    b = (torch.randperm(20, device="flagos").cpu(),
         torch.nn.functional.dropout(torch.ones(50, device="flagos"), 0.5).cpu(),
         torch.empty(10, device="flagos").uniform_().cpu())
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_ops_without_a_generator_argument_follow_the_flagos_generator(device0):
    # native_dropout takes no generator: its kernel draws from the twin's default generator,
    # which holds the flagos generator's state for the call (engines/twin/default_generator.h)
    x = torch.ones(1000, device="flagos")
    F.manual_seed(0)
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.randn(100)  # torch's CPU generator moves; flagos' does not
    F.manual_seed(0)
    assert torch.equal(torch.nn.functional.dropout(x, 0.5).cpu(), a)
    state = F.get_rng_state()
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    assert not torch.equal(a, b)  # the flagos generator advanced
    F.set_rng_state(state)
    assert torch.equal(torch.nn.functional.dropout(x, 0.5).cpu(), b)
    cpu_state = torch.get_rng_state()
    torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(torch.get_rng_state(), cpu_state)
    twin = F.twin_device(0)
    if twin is None:
        return
    torch.manual_seed(3)  # one seed: the same numbers as the twin's own kernel
    want = torch.nn.functional.dropout(torch.ones(1000, device=twin), 0.5).cpu()
    torch.manual_seed(3)
    assert torch.equal(torch.nn.functional.dropout(x, 0.5).cpu(), want)


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_dropout_recomputes_the_same_mask(device0, reentrant):
    # torch.utils.checkpoint restores the flagos RNG state (torch.flagos._initialized) for
    # the recomputation, which then draws the forward's dropout mask again
    masks = []

    class Dropout(torch.nn.Module):
        def forward(self, x):
            y = torch.nn.functional.dropout(x, 0.5, training=True)
            masks.append((y != 0).cpu())
            return y

    fl = torch.nn.Sequential(torch.nn.Linear(16, 16), Dropout()).to("flagos")
    x = torch.randn(8, 16).to("flagos").requires_grad_()
    F.manual_seed(1)
    fl(x).sum().backward()
    want = fl[0].weight.grad.cpu()
    fl.zero_grad()
    masks.clear()
    F.manual_seed(1)
    torch.utils.checkpoint.checkpoint(fl, x, use_reentrant=reentrant,
                                      preserve_rng_state=True).sum().backward()
    torch.testing.assert_close(fl[0].weight.grad.cpu(), want)
    assert all(torch.equal(m, masks[0]) for m in masks)
    if reentrant:
        assert len(masks) == 2  # the forward and its recomputation


def test_default_generators_is_a_tuple_as_in_torch_cuda():
    """torch indexes ``torch.<device>.default_generators`` (torch._prims.rng_prims)."""
    gens = torch.flagos.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.flagos.device_count()
    assert all(g.device == torch.device("flagos", i) for i, g in enumerate(gens))
    gens[0].manual_seed(7)
    a = torch.rand(4, device="flagos:0")
    torch.flagos.default_generators[0].manual_seed(7)
    assert torch.equal(torch.rand(4, device="flagos:0").cpu(), a.cpu())


def test_init_is_torch_cuda_init():
    torch.flagos.init()  # a device is there: nothing to do, no error


def test_a_generator_of_another_device_is_refused_as_torch_does():
    """torch checks a generator's device against the op's ("Expected a 'cuda' device type
    for generator but found 'cpu'"); through flagos as well, both ways round, rather than
    drawing from a generator of another device."""
    g = torch.Generator("flagos")
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'flagos'"):
        torch.randn(3, generator=g)
    with pytest.raises(RuntimeError, match="Expected a 'flagos' device type for generator but found 'cpu'"):
        torch.randn(3, generator=torch.Generator("cpu"), device="flagos")
    x = torch.zeros(4, device="flagos")
    with pytest.raises(RuntimeError, match="Expected a 'flagos' device type for generator"):
        x.normal_(generator=torch.Generator())
    assert torch.equal(x.cpu(), torch.zeros(4))  # the refused op wrote nothing
    g.manual_seed(3)
    a = torch.randn(3, generator=g, device="flagos")
    g.manual_seed(3)
    assert torch.equal(torch.randn(3, generator=g, device="flagos").cpu(), a.cpu())
