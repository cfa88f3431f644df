"""The sim HAL's test control: every fault kind armed at run time fails exactly the call it
names, with the HAL's message, and the live stream and event counts follow the handles."""

from __future__ import annotations

import ctypes

import flagos_hal
import pytest
from flagos_hal import HalError, Status
from flagos_hal.kernel_checks import _image as conformance_kernels
from flagos_hal.sim_control import SimControl

KINDS = ("malloc", "host_malloc", "memcpy", "memset", "free", "stream_create", "stream_query",
         "stream_synchronize", "stream_wait_event", "event_record", "event_query",
         "event_synchronize", "device_synchronize", "module_load", "launch_kernel", "replay_launch")


@pytest.fixture
def ctl(hal):
    c = SimControl(hal)
    yield c
    c.disarm()


def _empty_capture(hal) -> int:
    """A capture of nothing, on a stream of its own."""
    s = hal.stream_create(0)
    hal.begin_capture(s)
    capture = hal.end_capture(s)
    hal.stream_destroy(s)
    return capture


def _calls(hal):
    """One call of each kind, on live objects: (kind, the call's HAL function, thunk)."""
    p = hal.malloc(0, 256)
    s = hal.stream_create(0)
    e = hal.event_create()
    hal.event_record(e, s)
    src = ctypes.create_string_buffer(64)
    fmt, image = conformance_kernels(hal)
    module = hal.module_load(0, fmt, image)
    ids = hal.module_function(module, "program_ids")
    replay = hal.instantiate(_empty_capture(hal))
    out = [
        ("malloc", "malloc", lambda: hal.free(0, hal.malloc(0, 64))),
        ("host_malloc", "host_malloc", lambda: hal.host_free(hal.host_malloc(64))),
        ("memcpy", "memcpy", lambda: hal.call("memcpy", p, ctypes.addressof(src), 64, 1)),
        ("memset", "memset", lambda: hal.call("memset", p, 0, 64)),
        ("stream_create", "stream_create", lambda: hal.stream_destroy(hal.stream_create(0))),
        ("stream_query", "stream_query", lambda: (hal.stream_synchronize(s),
                                                   hal.call("stream_query", s))),
        ("stream_synchronize", "stream_synchronize", lambda: hal.stream_synchronize(s)),
        ("stream_wait_event", "stream_wait_event", lambda: hal.call("stream_wait_event", s, e)),
        ("event_record", "event_record", lambda: hal.event_record(e, s)),
        ("event_query", "event_query", lambda: (hal.stream_synchronize(s),
                                                 hal.call("event_query", e))),
        ("event_synchronize", "event_synchronize", lambda: hal.event_synchronize(e)),
        ("device_synchronize", "device_synchronize", lambda: hal.call("device_synchronize", 0)),
        ("module_load", "module_load", lambda: hal.module_unload(hal.module_load(0, fmt, image))),
        ("launch_kernel", "launch_kernel", lambda: hal.launch(ids, (1, 1, 1), (32, 1, 1), 0,
                                                              [ctypes.c_void_p(p)], s)),
        ("replay_launch", "replay_launch", lambda: hal.replay(replay, s)),
    ]

    def cleanup():
        hal.stream_synchronize(s)
        hal.replay_destroy(replay)
        hal.module_unload(module)
        hal.event_destroy(e)
        hal.stream_destroy(s)
        hal.free(0, p)
    return out, cleanup


def test_kinds_are_named_after_hal_calls(ctl):
    assert ctl.kinds == KINDS


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "free"])
def test_each_kind_fails_its_next_call_once(hal, ctl, kind):
    calls, cleanup = _calls(hal)
    try:
        fn, call = next((f, c) for k, c, f in calls if k == kind)
        fn()  # the kind works unarmed
        before = ctl.calls(kind)
        ctl.arm(f"{kind}:2")
        fn()  # 1st call from now
        with pytest.raises(HalError) as info:
            fn()  # 2nd: fails
        expected = Status.OUT_OF_MEMORY if kind in ("malloc", "host_malloc", "module_load") \
            else Status.DEVICE_FAULT
        assert info.value.status == expected
        assert f"{call}: injected fault (FLAGOS_SIM_FAULT)" in str(info.value)
        fn()  # 3rd: works again
        assert ctl.calls(kind) - before >= 3
    finally:
        ctl.disarm()
        cleanup()


def test_free_fault_keeps_the_allocation(hal, ctl):
    p = hal.malloc(0, 4096)
    free_before = hal.mem_get_info(0)[0]
    ctl.arm("free:1")
    with pytest.raises(HalError, match="free: injected fault"):
        hal.free(0, p)
    assert hal.mem_get_info(0)[0] == free_before  # still allocated, still freeable
    assert hal.pointer_attributes(p).type == flagos_hal.PointerType.DEVICE
    hal.free(0, p)


def test_live_counts_follow_streams_and_events(hal, ctl):
    streams, events = ctl.live()
    s, e = hal.stream_create(0), hal.event_create()
    assert ctl.live() == (streams + 1, events + 1)
    hal.event_destroy(e)
    hal.stream_destroy(s)
    assert ctl.live() == (streams, events)


def test_a_failed_stream_create_makes_no_stream(hal, ctl):
    before = ctl.live()
    ctl.arm("stream_create:1")
    with pytest.raises(HalError, match="stream_create: injected fault"):
        hal.stream_create(0)
    assert ctl.live() == before


def test_bad_specs_are_refused_and_change_nothing(hal, ctl):
    ctl.arm("malloc:1")
    for spec in ("nosuchcall:1", "malloc:0", "malloc", "malloc:x"):
        with pytest.raises(HalError, match="bad fault entry") as info:
            ctl.arm(spec)
        assert info.value.status == Status.INVALID_VALUE
    with pytest.raises(HalError, match="malloc: injected fault"):
        hal.malloc(0, 64)  # the earlier arm still holds
    with pytest.raises(HalError, match="unknown fault kind"):
        ctl.calls("nosuchcall")


def test_control_refuses_other_hals(tmp_path):
    class NotSim:
        name = "cuda"
    with pytest.raises(ValueError, match="sim HAL feature"):
        SimControl(NotSim())  # type: ignore[arg-type]


def test_a_lost_device_fails_every_call_until_reset(hal, ctl):
    s = hal.default_stream(0)
    ctl.arm("stream_synchronize:1:lost")
    with pytest.raises(HalError, match="injected fault .FLAGOS_SIM_FAULT., the device is lost"):
        hal.stream_synchronize(s)
    for call in (lambda: hal.malloc(0, 64), lambda: hal.call("stream_query", s),
                 lambda: hal.call("device_synchronize", 1)):
        with pytest.raises(HalError, match="lost after an injected fault of stream_synchronize") as e:
            call()
        assert e.value.status == Status.DEVICE_FAULT
    ctl.disarm()  # a reset
    hal.stream_synchronize(s)
    hal.free(0, hal.malloc(0, 64))
    with pytest.raises(HalError, match="bad fault entry"):
        ctl.arm("malloc:1:gone")
