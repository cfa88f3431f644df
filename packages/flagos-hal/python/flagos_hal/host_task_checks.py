"""Conformance checks of the optional host tasks (ABI 1.4: stream_launch_host_task): host
work queued on a stream runs in order with the stream's device work, once; a capture
records it and every replay runs it again; its data is released exactly once, also when
the call is refused. A HAL without the function skips them."""

from __future__ import annotations

from flagos_hal.binding import HOST_TASK_FN, Hal, Status
from flagos_hal.checks import Skip, check, expect, expect_status

N = 1 << 20
_FN = HOST_TASK_FN


class _Tasks:
    """Counts runs and releases per data value, and reads a byte of device memory at
    each run (which a host task may do where the host addresses device memory)."""

    def __init__(self, hal: Hal, watch: int | None = None) -> None:
        self.runs: list[int] = []
        self.released: list[int] = []
        self.seen: list[bytes] = []
        self.hal, self.watch = hal, watch
        self.fn = _FN(self._run)
        self.release = _FN(lambda data: self.released.append(data or 0))

    def _run(self, data: int | None) -> None:
        self.runs.append(data or 0)
        if self.watch is not None:
            self.seen.append(self.hal.read(self.watch, 1))

    def launch(self, stream: int, data: int) -> int:
        return self.hal.table.stream_launch_host_task(stream, self.fn, data, self.release)


def _needs_host_tasks(hal: Hal) -> None:
    if not hal.has("stream_launch_host_task"):
        raise Skip("the HAL has no host tasks (optional, ABI 1.4)")


@check("host_tasks")
def _host_tasks(hal: Hal):
    """A host task runs once, after the stream's earlier work, and its data is released
    after that run; a NULL fn or a destroyed stream is refused and releases the data."""
    _needs_host_tasks(hal)
    stream = hal.stream_create(0)
    p = hal.malloc(0, N)
    tasks = _Tasks(hal, watch=p + N - 1 if hal.native_device() == 1 else None)
    try:
        for i in range(1, 4):
            hal.memset_async(p, i, N, stream)
        expect_status(tasks.launch(stream, 7), Status.SUCCESS, "stream_launch_host_task")
        hal.stream_synchronize(stream)
        expect(tasks.runs == [7] and tasks.released == [7],
               f"runs {tasks.runs}, releases {tasks.released}: want one of each")
        if tasks.watch is not None:
            expect(tasks.seen == [b"\x03"], f"the task ran before the stream's memsets: {tasks.seen}")
        refused = hal.table.stream_launch_host_task(stream, _FN(), 8, tasks.release)
        expect_status(refused, Status.INVALID_VALUE, "stream_launch_host_task with a NULL fn")
        expect(tasks.released == [7, 8], "a refused call did not release its data")
    finally:
        hal.free(0, p)
        hal.stream_destroy(stream)
    stale = tasks.launch(stream, 9)
    expect_status(stale, Status.INVALID_HANDLE, "stream_launch_host_task on a destroyed stream")
    expect(tasks.runs == [7] and tasks.released == [7, 8, 9], "a refused call ran or kept its data")
    return "run once in stream order; refusals release"


@check("host_tasks_captured")
def _host_tasks_captured(hal: Hal):
    """While the stream captures, a host task is recorded, not run; each replay runs it;
    its data is released once the capture and the replay are destroyed."""
    _needs_host_tasks(hal)
    if not hal.has_capture():
        raise Skip("the HAL has no stream capture (optional, ABI 1.3)")
    stream = hal.stream_create(0)
    tasks = _Tasks(hal)
    try:
        hal.begin_capture(stream)
        expect_status(tasks.launch(stream, 5), Status.SUCCESS, "stream_launch_host_task")
        capture = hal.end_capture(stream)
        hal.stream_synchronize(stream)
        expect(tasks.runs == [], "a recorded host task ran while it was recorded")
        replay = hal.instantiate(capture)
        for _ in range(3):
            hal.replay(replay, stream)
        hal.stream_synchronize(stream)
        expect(tasks.runs == [5, 5, 5] and tasks.released == [],
               f"3 replays: runs {tasks.runs}, releases {tasks.released}")
        hal.capture_destroy(capture)
        hal.replay_destroy(replay)
        hal.stream_synchronize(stream)
        expect(tasks.released == [5], f"after destroying both: releases {tasks.released}")
    finally:
        hal.stream_destroy(stream)
    return "recorded, run at each of 3 replays, released once"
