"""Native kernels in a graph capture: the reference library queues its kernels on the sim
stream as host tasks (flagos_hal/sim_runtime.h launch_host_task), so a capture records
them and each replay runs them again, on opaque memory as on a chip without a twin."""

from __future__ import annotations

import pytest
import torch
from flagos.provider_api import route_ops_as_themselves
from route_stats import calls


def test_native_kernels_are_captured_and_replayed(native_first):
    torch.manual_seed(0)
    x, w, b = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    dx, dw, db = x.to("flagos"), w.to("flagos"), b.to("flagos")
    g = torch.flagos.Graph()
    with torch.flagos.graph(g):
        out = torch.relu(torch.addmm(db, dx, dw)).sum(dim=1)
    assert calls("aten::addmm", "native") == 1 and calls("aten::relu", "native") == 1
    for _ in range(2):  # new inputs copied in, then replayed
        g.replay()
        torch.testing.assert_close(out.cpu(), torch.relu(torch.addmm(b, x, w)).sum(dim=1))
        x = torch.randn(8, 16)
        dx.copy_(x.to("flagos"))
    assert calls("aten::addmm", "native") == 1  # replays call no provider


def test_python_numbers_are_constants_of_the_graph(native_first):
    # A Python number reaches a binary kernel as a one-element device tensor, and a fill on
    # opaque memory is a copy from the host: in a capture both copy from pinned memory the
    # graph keeps, at every replay.
    # The number is copied in by the runtime, never by aten::_to_copy or aten::copy_: a
    # provider may route those as themselves (FlagGems does, as here), and without a twin
    # their only server is the CPU fallback.
    route_ops_as_themselves(["aten::_to_copy", "aten::copy_"])
    x = torch.randn(64)
    dx = x.to("flagos")
    g = torch.flagos.Graph()
    with torch.flagos.graph(g):
        out = dx * 0.5 + torch.full((64,), 2.0, device="flagos")  # a fill on opaque memory
    assert calls("aten::mul", "native") == 1 and calls("aten::add", "native") == 1
    for _ in range(2):
        g.replay()
        torch.testing.assert_close(out.cpu(), x * 0.5 + 2.0)
        x = torch.randn(64)
        dx.copy_(x.to("flagos"))
    del g


def test_a_host_copy_on_opaque_memory_fails_the_capture(native_first):
    dx = torch.ones(4, device="flagos")
    refused = "blocking copy between flagos:0 and host memory"
    with pytest.raises(RuntimeError, match=refused), torch.flagos.graph(torch.flagos.Graph()):
        dx.copy_(torch.zeros(4))
    torch.testing.assert_close(dx.cpu(), torch.ones(4))


def test_a_number_moved_to_the_device_takes_the_runtime_copy(native_first):
    # Routed as themselves (as FlagGems routes them), _to_copy and copy_ of a 0-dim CPU
    # tensor still move it with the runtime's copy, never through the CPU fallback.
    route_ops_as_themselves(["aten::_to_copy", "aten::copy_"])
    before = calls("aten::_to_copy", "cpu") + calls("aten::copy_", "cpu")
    moved = torch.tensor(0.5, dtype=torch.float64).to("flagos", torch.float32)
    dest = torch.empty((), device="flagos")
    dest.copy_(torch.tensor(3.0))
    assert calls("aten::_to_copy", "cpu") + calls("aten::copy_", "cpu") == before
    assert moved.item() == 0.5 and dest.item() == 3.0
