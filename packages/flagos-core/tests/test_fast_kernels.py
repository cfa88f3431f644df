"""The unboxed kernels of hot ops (csrc/engines/twin/fast_kernels.cpp): on a route that starts
with the twin engine they run the twin's kernel directly (a structured op on a CPU twin as
its functional kernel, result adopted from flagos memory); on any other route torch's own
path is kept, so providers see the same ops as without them."""

from __future__ import annotations

import copy
import gc
import sys
import threading

import flagos
import pytest
import torch
from flagos import _C
from flagos.routing import Provider

DEV = "flagos:0"


class Recorder(Provider):
    """A Python provider for `ops` that records the op names it receives and declines
    them, so that the next provider of the chain runs the op."""

    def __init__(self, name: str, ops: set[str]) -> None:
        super().__init__(name)
        self.ops = ops
        self.calls: list[str] = []

    def serves(self, op: str) -> bool:
        return any(op == o or op.startswith(o + ".") for o in self.ops)

    def __call__(self, op, args, kwargs):
        self.calls.append(op.name())
        return NotImplemented


@pytest.fixture(autouse=True)
def _clean_routes():
    if "twin" not in flagos.routing.providers():  # the core's twin engine, as in test_dispatch

        class Twin(Provider):
            name = "twin"
            is_cpp = True

        _C._register_provider("twin", "twin")
        flagos.routing.register_provider(Twin())
    yield
    flagos.routing.reset()


def _calls(op: str, provider: str) -> int:
    return flagos.routing.stats().get(op, {}).get(provider, {}).get("calls", 0)


def test_structured_op_runs_functional_on_the_cpu_twin_with_its_result_in_flagos_memory():
    if _C._twin_device(0) != "cpu":
        pytest.skip("flagos:0 has no CPU twin")
    a, b = torch.randn(64, 64, device=DEV), torch.randn(64, 64, device=DEV)
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["cpu"]}):
        r = torch.add(a, b, alpha=2)
    expected = torch.add(a.cpu(), b.cpu(), alpha=2)
    gc.collect()
    with_r = flagos.memory_allocated(0)
    r_cpu = r.cpu()
    del r  # its bytes are flagos memory, counted by the flagos allocator
    assert with_r - flagos.memory_allocated(0) >= expected.numel() * expected.element_size()
    assert _calls("aten::add.Tensor", "cpu") == 1
    assert _calls("aten::add.out", "cpu") == 0  # no composite, no out= round trip
    torch.testing.assert_close(r_cpu, expected)


def test_other_routes_keep_the_composite_so_providers_see_the_out_form():
    probe = Recorder("probe_fast", {"aten::add", "aten::mm"})
    flagos.routing.register_provider(probe)
    a, b = torch.randn(8, 8, device=DEV), torch.randn(8, 8, device=DEV)
    ref = a.cpu() @ b.cpu() + a.cpu()
    with flagos.routing.override({"default": ["probe_fast", "cpu"]}):
        r = a @ b + a
        a2 = a.clone()
        a2.add_(b)
    assert "aten::mm.out" in probe.calls and "aten::add.out" in probe.calls
    assert not any(c in probe.calls for c in ("aten::mm", "aten::add.Tensor", "aten::add_.Tensor"))
    torch.testing.assert_close(r.cpu(), ref)
    torch.testing.assert_close(a2.cpu(), a.cpu() + b.cpu())


@pytest.mark.parametrize("route", ["cpu", "twin"])
def test_in_place_and_out_return_the_callers_tensors(route):
    a, b = torch.randn(5, 6, device=DEV), torch.randn(5, 6, device=DEV)
    a_cpu = a.cpu()
    out = torch.empty(0, device=DEV)  # resized by the kernel
    with flagos.routing.override({"default": [route]}):
        assert a.mul_(b) is a
        assert torch.mm(a, b.t(), out=out) is out
        x = torch.randn(3, device=DEV)
        assert torch.add(x, x, out=x) is x  # one tensor passed three times
    torch.testing.assert_close(a.cpu(), a_cpu * b.cpu())
    assert out.shape == (5, 5) and out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), a.cpu() @ b.cpu().t())


@pytest.mark.parametrize("route", ["cpu", "twin"])
def test_failing_fast_kernel_leaves_inputs_and_device_usable(route):
    a, b = torch.randn(4, 4, device=DEV), torch.randn(3, 5, device=DEV)
    before = (a.cpu().clone(), b.cpu().clone(), a.data_ptr(), a.shape)
    with flagos.routing.override({"default": [route]}):
        with pytest.raises(RuntimeError, match="size|shape"):
            a.add_(b)
        with pytest.raises(RuntimeError, match="cannot be multiplied|shapes"):
            torch.mm(a, b)
        with pytest.raises(RuntimeError, match="can't be cast|result type"):
            torch.add(a, a, out=torch.empty(4, 4, dtype=torch.int64, device=DEV))
    assert torch.equal(a.cpu(), before[0]) and torch.equal(b.cpu(), before[1])
    assert (a.data_ptr(), a.shape) == before[2:]
    torch.testing.assert_close((a @ a).cpu(), before[0] @ before[0])


def test_fast_kernels_keep_no_reference_to_their_arguments():
    a, b = torch.randn(8, 8, device=DEV), torch.randn(8, 8, device=DEV)
    refs = sys.getrefcount(a), sys.getrefcount(b)
    for _ in range(10):
        torch.add(a, b)
        a.add_(b)
        torch.softmax(a, -1)
    assert (sys.getrefcount(a), sys.getrefcount(b)) == refs


def test_training_step_of_hot_ops_matches_cpu():
    """Forward and backward through the listed ops (matmuls, layer norm, GELU, SiLU,
    softmax, NLL, the optimizer's in-place updates) against the CPU."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
              torch.nn.Linear(32, 32), torch.nn.SiLU(), torch.nn.Linear(32, 10)]
    cpu_model = torch.nn.Sequential(*layers)
    dev_model = copy.deepcopy(cpu_model).to(DEV)
    x, y = torch.randn(12, 16), torch.randint(0, 10, (12,))
    results = []
    for model, dev in ((cpu_model, "cpu"), (dev_model, DEV)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
        results.append([p.detach().cpu() for p in model.parameters()] + [loss.detach().cpu()])
    for c, f in zip(*results):
        torch.testing.assert_close(f, c, rtol=1e-4, atol=1e-5)


def test_threads_run_fast_kernels_concurrently():
    torch.manual_seed(0)
    a_cpu, b_cpu = torch.randn(32, 32), torch.randn(32, 32)
    expect = torch.softmax(a_cpu @ b_cpu + a_cpu, -1)
    errors: list[BaseException] = []

    def worker():
        try:
            a, b = a_cpu.to(DEV), b_cpu.to(DEV)
            for _ in range(200):
                torch.testing.assert_close(torch.softmax(a @ b + a, -1).cpu(), expect)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]


def test_relu_on_a_device_twin_has_its_result_in_flagos_memory():
    """On CUDA, relu runs as the CUDA kernel with its result allocated in flagos memory
    (device results); where flagos was built without them, as clamp_min(self, 0) on flagos,
    whose result is a flagos tensor too. Either way no copy; a route that sends only relu to
    the twin keeps relu whole (clamp_min's route must not decide where relu runs)."""
    if _C._twin_device(0) in ("cpu", "none"):
        pytest.skip("flagos:0 has no device twin")
    a = torch.randn(64, 64, device=DEV)
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["twin"]}):
        r = torch.relu(a)
    if _C._device_results():
        assert _calls("aten::relu", "twin") == 1 and _calls("aten::clamp_min.out", "twin") == 0
    else:
        assert _calls("aten::clamp_min.out", "twin") == 1 and _calls("aten::relu", "twin") == 0
    torch.testing.assert_close(r.cpu(), torch.relu(a.cpu()))
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["cpu"], "aten::relu": ["twin"]}):
        r = torch.relu(a)
    assert _calls("aten::relu", "twin") == 1
    torch.testing.assert_close(r.cpu(), torch.relu(a.cpu()))
    with pytest.raises(RuntimeError, match="Boolean inputs not supported for relu"):
        torch.relu(a > 0)


@pytest.mark.parametrize("route", ["cpu", "twin"])
def test_tensors_on_other_devices_get_torchs_device_error(route, two_devices):
    """A CPU twin kernel cannot tell another device's tensor from an alias: such calls take
    torch's own path, whose checks name the devices (0-dim CPU scalars are accepted)."""
    a0, b1 = torch.ones(3, device="flagos:0"), torch.ones(3, device="flagos:1")
    c = torch.zeros(3)
    with flagos.routing.override({"default": [route]}):
        for bad in (lambda: a0 + b1, lambda: a0.clone().add_(b1), lambda: a0 + torch.ones(3),
                    lambda: c.add_(a0), lambda: torch.ops.aten.gelu_backward(a0, b1)):
            with pytest.raises(RuntimeError, match="same device"):
                bad()
        torch.testing.assert_close((a0 + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))
    assert torch.equal(c, torch.zeros(3))


@pytest.mark.parametrize("route", ["cpu", "twin"])
def test_partly_overlapping_in_place_arguments_are_refused_as_natively(route):
    x = torch.arange(6.0, device=DEV)
    with flagos.routing.override({"default": [route]}):
        with pytest.raises(RuntimeError, match="single memory location"):
            x[1:].add_(x[:-1])
        with pytest.raises(RuntimeError, match="single memory location"):
            x[1:].mul_(x[:-1])
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_route_for_the_out_form_alone_still_receives_it():
    """Without fast kernels, add/add_/mm reach the dispatcher as add.out/mm.out: a provider
    routed for those forms only must still get them."""
    probe = Recorder("probe_out_only", {"aten::add", "aten::mm"})
    flagos.routing.register_provider(probe)
    a, b = torch.randn(4, 4, device=DEV), torch.randn(4, 4, device=DEV)
    spec = {"default": ["twin"], "aten::add.out": ["probe_out_only", "cpu"],
            "aten::mm.out": ["probe_out_only", "cpu"]}
    with flagos.routing.override(spec):
        r = a + b
        a2 = a.clone()
        a2.add_(b)
        m = a @ b
    assert probe.calls == ["aten::add.out", "aten::add.out", "aten::mm.out"]
    torch.testing.assert_close(r.cpu(), a.cpu() + b.cpu())
    torch.testing.assert_close(a2.cpu(), a.cpu() + b.cpu())
    torch.testing.assert_close(m.cpu(), a.cpu() @ b.cpu())
