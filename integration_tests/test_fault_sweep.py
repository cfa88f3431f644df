"""The fault-injection sweep (fault_sweep.py), sized for CI: every fault kind of the HAL
kit at its first calls within a training and an inference step, on the HAL under test (sim
in CI, cuda on a GPU machine), on host-addressable and on opaque memory (one process each:
FLAGOS_NO_TWIN is read at load)."""

from __future__ import annotations

import fault_sweep
import pytest
import torch

FIRST = 3  # calls per kind; the benchmark-style run (docs/faults.md) goes further


def _no_fault_control() -> str:
    """Why flagos:0's HAL takes no injected faults, or "" when it does."""
    try:
        fault_sweep.control()
    except ValueError as e:
        return f"flagos:0's HAL has no test control: {e}"
    return ""


@pytest.mark.skipif(bool(_no_fault_control()), reason=_no_fault_control() or "-")
@pytest.mark.parametrize("opaque", [False, True], ids=["host", "opaque"])
def test_every_injection_point_survives(opaque):
    result = fault_sweep.run_mode(FIRST, opaque, hal=fault_sweep.hal_name())
    points = result["points"]
    per_kind = {(p["workload"], p["kind"]) for p in points}
    # Every kind the workloads call is tried (host_malloc: no pinned memory in them).
    for workload, calls in result["calls_per_step"].items():
        for kind, n in calls.items():
            if n:
                assert (workload, kind) in per_kind, (workload, kind)
    for kind in ("memcpy", "stream_synchronize", "event_record", "stream_wait_event",
                 "event_synchronize", "device_synchronize", "malloc", "free"):
        assert any(p["kind"] == kind for p in points), f"{kind} was never injected"
    bad = [f"{p['workload']} {p['kind']}:{p['call']}: {'; '.join(p['problems'])}"
           for p in points if not p["survived"]]
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(bool(_no_fault_control()), reason=_no_fault_control() or "-")
def test_a_failed_stream_create_leaves_the_pool_usable():
    """The stream pool creates its HAL streams on first use, which the sweep's warm-up
    already did: fail a creation here, at a priority whose pool is not full yet."""
    ctl = fault_sweep.control()
    fault_sweep.touch_default_streams()  # a fault's probe would create them (lazily)
    live = ctl.live()
    for priority in (-2, -1, 0):
        before = ctl.calls("stream_create")
        ctl.arm("stream_create:1")
        try:
            s = torch.flagos.Stream(priority=priority)
        except RuntimeError as e:
            msg = str(e)
            break
        finally:
            ctl.disarm()
        assert ctl.calls("stream_create") == before  # the pool was full: nothing created
        del s
    else:
        pytest.skip("every stream pool is full in this process")
    assert "call stream_create failed" in msg and fault_sweep.injected() in msg, msg
    assert ctl.live() == live  # no stream was made
    s = torch.flagos.Stream(priority=priority)  # the pool goes on where it stopped
    x = torch.arange(8.0, device="flagos")
    with torch.flagos.stream(s):
        y = x * 3
    s.synchronize()
    assert torch.equal(y.cpu(), torch.arange(8.0) * 3)
    assert ctl.live()[0] == live[0] + 1
