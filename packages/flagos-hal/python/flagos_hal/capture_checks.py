"""Conformance checks of the optional stream capture (ABI 1.3: stream_*_capture,
capture_*, replay_*): work queued on a capturing stream is recorded, not run; a replay runs
it again on the same addresses, as often as asked; what may not meet a capturing stream is
refused and invalidates the capture. A HAL without the extension skips them.

The captured work is device-side only (device-to-device copies, memsets, and a kernel
launch where the HAL has the kernel extension), so the checks hold on any chip."""

from __future__ import annotations

import ctypes
import struct

from flagos_hal.binding import Hal, HalError, MemcpyKind, Status
from flagos_hal.checks import Skip, check, expect, expect_status

D2D = MemcpyKind.DEVICE_TO_DEVICE
N = 4096


def _needs_capture(hal: Hal) -> None:
    if not hal.has_capture():
        raise Skip("the HAL has no stream capture (optional, ABI 1.3)")


@check("capture_replay")
def _capture_replay(hal: Hal):
    """Captured copies and memsets do not run while recorded; each replay runs them in the
    recorded order on the addresses they name, so new inputs written in place give new
    outputs; a replay outlives its capture's destruction and runs on any stream of the
    device; stream_is_capturing follows begin and end."""
    _needs_capture(hal)
    stream, other = hal.stream_create(0), hal.stream_create(0)
    src, mid, dst = (hal.malloc(0, N) for _ in range(3))
    hal.write(src, bytes(range(256)) * (N // 256))
    hal.memset(mid, 0, N)
    hal.memset(dst, 0, N)
    expect(not hal.is_capturing(stream), "stream_is_capturing before stream_begin_capture")
    hal.begin_capture(stream)
    expect(hal.is_capturing(stream), "stream_is_capturing after stream_begin_capture")
    hal.memset_async(mid, 0x5A, N // 2, stream)  # first half: 0x5A
    hal.memcpy_async(mid + N // 2, src, N // 2, D2D, stream)  # second half: src's first half
    hal.memcpy_async(dst, mid, N, D2D, stream)  # after both, in order
    capture = hal.end_capture(stream)
    expect(not hal.is_capturing(stream), "stream_is_capturing after stream_end_capture")
    hal.stream_synchronize(stream)
    expect(hal.read(dst, N) == bytes(N) and hal.read(mid, N) == bytes(N),
           "captured work ran while it was recorded")
    replay = hal.instantiate(capture)
    hal.capture_destroy(capture)  # the replay stands on its own
    hal.replay(replay, stream)
    hal.stream_synchronize(stream)
    want = b"\x5a" * (N // 2) + hal.read(src, N // 2)
    expect(hal.read(dst, N) == want, "the first replay did not compute the recorded work")
    hal.write(src, bytes(reversed(range(256))) * (N // 256))  # new input, same address
    hal.memset(dst, 0, N)
    hal.replay(replay, other)
    hal.replay(replay, other)  # twice, back to back
    hal.stream_synchronize(other)
    want = b"\x5a" * (N // 2) + hal.read(src, N // 2)
    expect(hal.read(dst, N) == want, "a replay after new input did not read the new input")
    hal.replay_destroy(replay)
    for p in (src, mid, dst):
        hal.free(0, p)
    hal.stream_destroy(stream)
    hal.stream_destroy(other)
    return "3 copies and memsets recorded, replayed 3 times"


@check("capture_kernels")
def _capture_kernels(hal: Hal):
    """A kernel launch is recorded with its argument values: each replay launches it again
    on those pointers, reading what they hold by then."""
    _needs_capture(hal)
    if not hal.has_kernels():
        raise Skip("the HAL has no kernel extension (optional, ABI 1.2)")
    from flagos_hal.kernel_checks import _image

    fmt, image = _image(hal)
    module = hal.module_load(0, fmt, image)
    add = hal.module_function(module, "vector_add")
    n = N // 4
    a, b, out = (hal.malloc(0, n * 4) for _ in range(3))
    stream = hal.stream_create(0)

    def floats(values) -> bytes:
        return struct.pack(f"<{n}f", *values)

    hal.write(a, floats(range(n)))
    hal.write(b, floats([1.0] * n))
    hal.memset(out, 0, n * 4)
    hal.begin_capture(stream)
    hal.launch(add, ((n + 63) // 64, 1, 1), (64, 1, 1), 0,
               [ctypes.c_void_p(a), ctypes.c_void_p(b), ctypes.c_void_p(out), ctypes.c_int64(n)],
               stream)
    capture = hal.end_capture(stream)
    hal.stream_synchronize(stream)
    expect(hal.read(out, n * 4) == bytes(n * 4), "a captured launch ran while it was recorded")
    replay = hal.instantiate(capture)
    for step in range(3):
        hal.write(b, floats([float(step)] * n))
        hal.replay(replay, stream)
        hal.stream_synchronize(stream)
        got = struct.unpack(f"<{n}f", hal.read(out, n * 4))
        expect(list(got) == [float(i + step) for i in range(n)], f"replay {step}: wrong sums")
    hal.replay_destroy(replay)
    hal.capture_destroy(capture)
    hal.module_unload(module)
    for p in (a, b, out):
        hal.free(0, p)
    hal.stream_destroy(stream)
    return f"vector_add ({fmt}) replayed 3 times"


@check("capture_refusals")
def _capture_refusals(hal: Hal):
    """A default stream does not capture; a stream does not begin twice or end unbegun;
    waiting for a capturing stream (stream_query, stream_synchronize, device_synchronize)
    fails and invalidates the capture, whose end then fails; a capturing stream is not
    destroyed; stale handles are INVALID_HANDLE."""
    _needs_capture(hal)
    inval = Status.INVALID_VALUE
    default = hal.default_stream(0)
    expect_status(hal.raw("stream_begin_capture", default), inval, "capture on a default stream", hal)
    stream = hal.stream_create(0)
    out = ctypes.c_void_p()
    expect_status(hal.raw("stream_end_capture", stream, ctypes.byref(out)), inval,
                  "stream_end_capture of a stream that is not capturing", hal)
    for wait in ("stream_query", "stream_synchronize", "device_synchronize"):
        hal.begin_capture(stream)
        expect_status(hal.raw("stream_begin_capture", stream), inval, "stream_begin_capture twice", hal)
        arg = 0 if wait == "device_synchronize" else stream
        expect_status(hal.raw(wait, arg), inval, f"{wait} while capturing", hal)
        expect_status(hal.raw("stream_end_capture", stream, ctypes.byref(out)), inval,
                      f"stream_end_capture after {wait} invalidated the capture", hal)
        expect(wait in hal.last_error_message(), f"the message names {wait}: {hal.last_error_message()!r}")
        expect(not hal.is_capturing(stream), f"the stream still captures after {wait}")
    hal.begin_capture(stream)
    expect_status(hal.raw("stream_destroy", stream), inval, "stream_destroy while capturing", hal)
    capture = hal.end_capture(stream)  # an empty capture is one
    replay = hal.instantiate(capture)
    hal.replay(replay, stream)
    hal.stream_synchronize(stream)
    hal.replay_destroy(replay)
    hal.capture_destroy(capture)
    expect_status(hal.raw("replay_launch", replay, stream), Status.INVALID_HANDLE,
                  "replay_launch of a destroyed replay", hal)
    expect_status(hal.raw("capture_instantiate", capture, ctypes.byref(out)), Status.INVALID_HANDLE,
                  "capture_instantiate of a destroyed capture", hal)
    if hal.device_count() > 1:
        other = hal.stream_create(1)
        hal.begin_capture(stream)
        capture = hal.end_capture(stream)
        replay = hal.instantiate(capture)
        expect_status(hal.raw("replay_launch", replay, other), inval,
                      "replay_launch on a stream of another device", hal)
        hal.replay_destroy(replay)
        hal.capture_destroy(capture)
        hal.stream_destroy(other)
    try:
        hal.stream_destroy(stream)
    except HalError as e:
        raise AssertionError(f"the stream is unusable after its captures: {e}") from e
    return "default stream, twice, unbegun, 3 waits, destroy, stale handles"


@check("capture_allocates")
def _capture_allocates(hal: Hal):
    """The thread that captures may allocate device and pinned host memory meanwhile (a
    graph's memory pool grows during its capture): the allocations succeed, are not part
    of the capture, and captured work may use them; the capture still ends and replays."""
    _needs_capture(hal)
    stream = hal.stream_create(0)
    src = hal.malloc(0, N)
    hal.write(src, bytes(range(256)) * (N // 256))
    hal.begin_capture(stream)
    try:
        dst = hal.malloc(0, N)
        pinned = hal.host_malloc(N)
    except HalError as e:
        hal.end_capture(stream)
        raise AssertionError(f"allocating while this thread captures failed: {e}") from e
    hal.memcpy_async(dst, src, N, D2D, stream)
    capture = hal.end_capture(stream)
    replay = hal.instantiate(capture)
    hal.memset(dst, 0, N)
    hal.replay(replay, stream)
    hal.stream_synchronize(stream)
    expect(hal.read(dst, N) == hal.read(src, N), "a replay did not fill memory allocated during its capture")
    hal.replay_destroy(replay)
    hal.capture_destroy(capture)
    hal.host_free(pinned)
    for p in (src, dst):
        hal.free(0, p)
    hal.stream_destroy(stream)
    return "device and pinned host memory allocated while capturing"


@check("capture_overlaps")
def _capture_overlaps(hal: Hal):
    """Two streams of the device capture at once on one thread (two graphs recorded side
    by side, as graphs sharing a memory pool are): one capture ends, is instantiated and
    destroyed while the other still records; each replays what it recorded alone. Nothing
    here waits or reads memory while a stream records: on CUDA a synchronous copy meets a
    capturing stream and invalidates its capture."""
    _needs_capture(hal)
    first, second = hal.stream_create(0), hal.stream_create(0)
    a, b = hal.malloc(0, N), hal.malloc(0, N)
    hal.memset(a, 0, N)
    hal.memset(b, 0, N)
    hal.begin_capture(first)
    hal.begin_capture(second)
    hal.memset_async(a, 0x11, N, first)
    hal.memset_async(b, 0x22, N, second)
    try:
        capture = hal.end_capture(first)
        replay_first = hal.instantiate(capture)
        hal.capture_destroy(capture)
        still = hal.is_capturing(second)
    except HalError as e:
        hal.end_capture(second)
        raise AssertionError(f"ending a capture while another stream captures failed: {e}") from e
    capture = hal.end_capture(second)
    expect(still, "the second stream stopped capturing when the first ended")
    replay_second = hal.instantiate(capture)
    hal.capture_destroy(capture)
    hal.stream_synchronize(second)
    expect(hal.read(a, N) == bytes(N) and hal.read(b, N) == bytes(N),
           "captured work ran while it was recorded")
    hal.replay(replay_first, first)
    hal.stream_synchronize(first)
    expect(hal.read(a, N) == b"\x11" * N and hal.read(b, N) == bytes(N),
           "the first graph's replay did not run its work alone")
    hal.replay(replay_second, second)
    hal.stream_synchronize(second)
    expect(hal.read(b, N) == b"\x22" * N, "the second graph's replay did not run its work")
    for r in (replay_first, replay_second):
        hal.replay_destroy(r)
    for p in (a, b):
        hal.free(0, p)
    for s in (first, second):
        hal.stream_destroy(s)
    return "two streams at once; one ended and instantiated while the other records"
