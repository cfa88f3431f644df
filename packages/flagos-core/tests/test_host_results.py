"""Fresh results of CPU-twin kernels are made in flagos memory and adopted, not copied
(csrc/engines/twin/host_results.h): on a host-addressable HAL only. A convolution's forward and
backward (mkldnn allocates through raw_allocate in the scope) are checked by
flagos-ops-boxing's test_convolutions_run_on_the_twin_forward_and_backward."""

from __future__ import annotations

import flagos
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

F = torch.flagos


@pytest.fixture(autouse=True)
def host_twin() -> None:
    twin = flagos.twin_device()
    if twin is None or twin.type != "cpu":
        pytest.skip("needs a HAL whose twin is the CPU (host-addressable memory)")


def _ops_inside(fn) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events()]


@pytest.mark.parametrize("route", ["boxing", "cpu"])
def test_fresh_result_is_adopted_without_a_copy(route):
    if route not in flagos.routing.providers():
        pytest.skip(f"provider {route} not installed")
    x = torch.randn(64, 64, device="flagos")
    with flagos.routing.override({"aten::relu": route}):
        y = torch.relu(x)
        names = _ops_inside(lambda: torch.relu(x))
    assert y.device.type == "flagos"
    torch.testing.assert_close(y.cpu(), torch.relu(x.cpu()), rtol=0, atol=0)
    # Before adoption the twin engine allocated a flagos tensor and copied into it.
    assert "aten::relu" in names
    assert "aten::copy_" not in names and "aten::empty_strided" not in names, names


def test_adopted_result_is_counted_and_freed():
    torch.flagos.synchronize()
    x = torch.randn(256, 256, device="flagos")
    before = F.memory_allocated()
    y = torch.relu(x)
    assert F.memory_allocated() - before == 256 * 256 * 4
    y.add_(1)  # an adopted result is an ordinary flagos tensor
    torch.testing.assert_close(y.cpu(), torch.relu(x.cpu()) + 1)
    del y
    assert F.memory_allocated() == before


def test_results_shared_between_outputs_stay_correct():
    # unbind's results are views of the input (not fresh); split of a fresh tensor's
    # results share one storage: each must still hold the right values.
    x = torch.randn(6, 4, device="flagos")
    parts = (x * 2).split(2)
    for p, ref in zip(parts, (x.cpu() * 2).split(2)):
        torch.testing.assert_close(p.cpu(), ref)
    a, b = torch.sort(x, dim=1)  # two fresh results of one kernel
    ra, rb = torch.sort(x.cpu(), dim=1)
    assert torch.equal(a.cpu(), ra) and torch.equal(b.cpu(), rb)


def test_out_tensor_grown_by_the_kernel_leaves_no_memory_behind():
    # The kernel reallocates the out= alias (in flagos memory, in the scope); its bytes are
    # copied into the caller's tensor, and the alias, kept in the per-thread alias cache,
    # must not hold on to them.
    torch.flagos.synchronize()
    a = torch.randn(16, 16, device="flagos")
    start = F.memory_allocated()
    grow = torch.empty(0, device="flagos")
    for n in (4, 64, 128):
        torch.add(a.flatten()[:n], 1, out=grow)
        torch.testing.assert_close(grow.cpu(), a.cpu().flatten()[:n] + 1)
    del grow
    assert F.memory_allocated() == start


def test_a_result_something_else_holds_is_copied_not_taken():
    # A kernel that keeps its result (a cache) as well as returning it: adoption would
    # leave the kept tensor without data.
    kept = []
    lib = torch.library.Library("flagos_host_results_test", "DEF")
    lib.define("keep(Tensor x) -> Tensor")

    def keep(x):
        y = x * 2
        kept.append(y)
        return y

    lib.impl("keep", keep, "CPU")
    x = torch.ones(3, device="flagos")
    with flagos.routing.override({"flagos_host_results_test::keep": "cpu"}):
        y = torch.ops.flagos_host_results_test.keep(x)
    assert y.cpu().tolist() == [2.0] * 3
    assert kept[0].tolist() == [2.0] * 3  # still readable


def test_a_lazy_conjugate_result_keeps_its_meaning():
    x = torch.tensor([1 + 2j, 3 - 4j], device="flagos")
    with torch.inference_mode():
        got = torch.ops.aten.conj(x * 1)
    assert torch.equal(got.cpu().resolve_conj(), torch.tensor([1 - 2j, 3 + 4j]))
