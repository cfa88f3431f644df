"""Streams and events on the HAL: many streams, cross-stream waits, per-stream
synchronize, elapsed_time, the stream context, real overlap, and threads."""

from __future__ import annotations

import threading
import time

import flagos
import pytest
import torch

F = torch.flagos
MiB = 1 << 20


def _pinned(nbytes: int, value: int = 0) -> torch.Tensor:
    return torch.full((nbytes,), value, dtype=torch.uint8).pin_memory()


def test_stream_types_and_identity(device0):
    s = F.Stream()
    assert isinstance(s, torch.Stream) and isinstance(s, F.Stream)
    assert s.device == torch.device("flagos", 0)
    assert s != F.default_stream()
    assert F.current_stream() == F.default_stream()
    assert F.default_stream().stream_id == 0
    assert isinstance(F.current_stream(), F.Stream)
    hi = F.Stream(priority=-1)
    lo_, hi_ = flagos._C._stream_priority_range(0)
    assert hi.priority == max(-1, hi_)
    assert F.Stream(priority=-100).priority == hi_  # clamped to the HAL's range
    assert lo_ >= hi_


def test_many_streams_per_device(two_devices):
    streams = [F.Stream(device=d) for d in (0, 1) for _ in range(16)]
    assert {s.device_index for s in streams} == {0, 1}
    outs = []
    for i, s in enumerate(streams):
        with F.stream(s):
            assert F.current_stream(s.device_index) == s
            x = torch.full((8,), float(i), device=f"flagos:{s.device_index}")
            outs.append((x * 2).sum())
    for s in streams:
        s.synchronize()
        assert s.query()
    assert [o.item() for o in outs] == [16.0 * i for i in range(len(streams))]


def test_stream_context_restores_stream_and_device(two_devices, device0):
    s1 = F.Stream(device=1)
    with F.stream(s1):
        assert F.current_device() == 1
        assert F.current_stream() == s1
    assert F.current_device() == 0
    assert F.current_stream(1) == F.default_stream(1)
    with F.stream(None):
        assert F.current_stream() == F.default_stream()
    s0 = F.Stream()
    with s0:  # torch.Stream's own context manager
        assert F.current_stream() == s0
    assert F.current_stream() == F.default_stream()
    F.set_stream(s0)
    assert F.current_stream() == s0
    F.set_stream(F.default_stream())


def test_per_stream_synchronize_is_not_device_wide(device0, sim_only):
    busy, idle = F.Stream(), F.Stream()
    src = _pinned(256 * MiB, 1)
    dst = torch.empty(256 * MiB, dtype=torch.uint8, device="flagos")
    with F.stream(busy):
        dst.copy_(src, non_blocking=True)
    idle.synchronize()  # must not wait for `busy`
    assert not busy.query()
    busy.synchronize()
    assert busy.query()


def test_cross_stream_wait_via_event(device0):
    producer, consumer = F.Stream(), F.Stream()
    src = _pinned(128 * MiB, 3)
    dev = torch.zeros(128 * MiB, dtype=torch.uint8, device="flagos")
    back = _pinned(128 * MiB, 0)
    with F.stream(producer):
        dev.copy_(src, non_blocking=True)
        done = F.Event()
        done.record()
    consumer.wait_event(done)
    with F.stream(consumer):
        back.copy_(dev, non_blocking=True)
    consumer.synchronize()
    assert int(back[-1]) == 3 and int(back[0]) == 3 and bool((back == 3).all())


def test_wait_stream(device0):
    a, b = F.Stream(), F.Stream()
    src = _pinned(64 * MiB, 5)
    dev = torch.zeros(64 * MiB, dtype=torch.uint8, device="flagos")
    back = _pinned(64 * MiB, 0)
    with F.stream(a):
        dev.copy_(src, non_blocking=True)
    b.wait_stream(a)
    with F.stream(b):
        back.copy_(dev, non_blocking=True)
    b.synchronize()
    assert bool((back == 5).all())


def test_event_elapsed_time_and_query(device0):
    start, end = F.Event(enable_timing=True), F.Event(enable_timing=True)
    assert isinstance(start, torch.Event)
    src = _pinned(64 * MiB, 1)
    dst = torch.empty(64 * MiB, dtype=torch.uint8, device="flagos")
    start.record()
    dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    assert end.query()
    ms = start.elapsed_time(end)
    assert ms > 0
    assert end.elapsed_time(start) == pytest.approx(-ms)
    # Events made by torch itself time too.
    e1 = F.current_stream().record_event(torch.Event(device="flagos", enable_timing=True))
    e2 = F.current_stream().record_event(torch.Event(device="flagos", enable_timing=True))
    e2.synchronize()
    assert e1.elapsed_time(e2) >= 0


def test_streams_overlap(device0, sim_only):
    """Two streams each copy 128 MiB: their event intervals overlap in time."""
    s1, s2 = F.Stream(), F.Stream()
    srcs = [_pinned(128 * MiB, i + 1) for i in range(2)]
    dsts = [torch.empty(128 * MiB, dtype=torch.uint8, device="flagos") for _ in range(2)]
    marks = []
    for s, src, dst in zip((s1, s2), srcs, dsts):
        b, e = F.Event(enable_timing=True), F.Event(enable_timing=True)
        with F.stream(s):
            b.record()
            dst.copy_(src, non_blocking=True)
            e.record()
        marks.append((b, e))
    (b1, e1), (b2, e2) = marks
    e1.synchronize()
    e2.synchronize()
    # Intervals [b1, e1] and [b2, e2] intersect: each started before the other finished.
    assert b2.elapsed_time(e1) > 0, "stream 2 started only after stream 1 had finished"
    assert b1.elapsed_time(e2) > 0
    assert int(dsts[0][-1]) == 1 and int(dsts[1][-1]) == 2


def test_non_blocking_copy_lets_host_proceed(device0, sim_only):
    src = _pinned(256 * MiB, 9)
    dst = torch.empty(256 * MiB, dtype=torch.uint8, device="flagos")
    t0 = time.perf_counter()
    dst.copy_(src, non_blocking=True)
    queued = time.perf_counter() - t0
    stream_busy = not F.current_stream().query()
    F.current_stream().synchronize()
    total = time.perf_counter() - t0
    assert stream_busy, "the copy had already finished when copy_ returned"
    assert queued < total
    assert int(dst[0]) == 9 and int(dst[-1]) == 9
    # The blocking form returns only after the copy is done.
    dst2 = torch.empty(256 * MiB, dtype=torch.uint8, device="flagos")
    dst2.copy_(src)
    assert F.current_stream().query()


def test_eight_threads_give_right_results(two_devices):
    errors: list[str] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            dev = f"flagos:{i % 2}"
            s = F.Stream(device=i % 2)
            barrier.wait()
            with F.stream(s):
                for k in range(25):
                    a = torch.full((32, 32), float(i + 1), device=dev)
                    b = torch.eye(32, device=dev) * (k + 1)
                    c = a @ b
                    got = c.sum().item()
                    want = 32 * 32 * (i + 1) * (k + 1)
                    if got != want:
                        errors.append(f"thread {i} step {k}: {got} != {want}")
                    back = c.cpu()
                    if not bool((back == (i + 1) * (k + 1)).all()):
                        errors.append(f"thread {i} step {k}: wrong copy")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {e!r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_event_on_other_device_rejected(two_devices):
    e = F.Event()
    e.record(F.Stream(device=0))
    with pytest.raises(RuntimeError):
        e.record(F.Stream(device=1))


def test_host_access_sync_waits_for_the_current_stream(device0, sim_only):
    """What compiled host kernels call before touching flagos memory (flagos_compile):
    the current stream's queued copy is done when it returns; an idle stream returns at once."""
    from flagos import _C

    s = F.Stream()
    src = _pinned(256 * MiB, 7)
    dst = torch.empty(256 * MiB, dtype=torch.uint8, device="flagos")
    with F.stream(s):
        dst.copy_(src, non_blocking=True)
        assert not s.query()
        _C._sync_for_host_access(0)
        assert s.query()
        _C._sync_for_host_access(0)  # idle: nothing to wait for
    assert int(dst[-1]) == 7
