import ctypes
import shutil
import subprocess

import flagos_hal
import pytest
from flagos_hal import HalError, MemcpyKind, PointerType, Status
from hal_testutil import run_python


def test_headers_and_libraries_installed():
    inc = flagos_hal.get_include()
    with open(f"{inc}/flagos_hal/flagos_hal.h") as f:
        assert "flagos_hal_get_table" in f.read()
    with open(f"{inc}/flagos_hal/loader.hpp") as f:
        assert "open_library" in f.read()
    assert flagos_hal.library_path("sim").endswith("libflagos_hal_sim.so")
    with pytest.raises(ValueError, match="bundled HALs are cuda, sim"):
        flagos_hal.library_path("nope")


def test_only_entry_symbols_exported(sim_path):
    """The ABI's entry and the kit's test control (test_control.h), nothing else."""
    out = subprocess.run(["nm", "-D", "--defined-only", sim_path], capture_output=True,
                         text=True, check=True).stdout
    assert sorted(line.split()[-1] for line in out.splitlines()) == [
        "flagos_hal_get_table", "flagos_hal_kit_test_control"]


def test_identity_and_properties(hal):
    assert hal.name == "sim" and hal.version.startswith("flagos-sim")
    assert hal.native_device() == flagos_hal.NativeDevice.CPU
    assert hal.device_count() == 2
    p = hal.device_properties(1)
    assert p.name == b"flagos-sim" and p.native_device_index == -1 and p.compute_units >= 1
    assert hal.mem_get_info(1)[1] == p.total_memory == 4 << 30


def test_round_trip_and_attributes(hal):
    p = hal.malloc(1, 1000)
    try:
        hal.write(p + 5, b"flagos")
        assert hal.read(p + 5, 6) == b"flagos"
        a = hal.pointer_attributes(p + 999)
        assert (a.type, a.device, a.base, a.size) == (PointerType.DEVICE, 1, p, 1000)
        assert hal.pointer_attributes(p + 1000).type == PointerType.UNKNOWN
    finally:
        hal.free(1, p)


def test_errors_name_library_and_function(hal, sim_path):
    with pytest.raises(HalError) as e:
        hal.malloc(0, 2**64 - 1)
    assert e.value.status == Status.OUT_OF_MEMORY
    assert "malloc" in str(e.value) and sim_path in str(e.value) and "OUT_OF_MEMORY" in str(e.value)
    with pytest.raises(HalError) as e:
        hal.set_device(2)
    assert e.value.status == Status.INVALID_DEVICE and "device 2 out of range" in str(e.value)


def test_free_on_wrong_device_and_unknown(hal):
    p = hal.malloc(0, 256)
    with pytest.raises(HalError) as e:
        hal.free(1, p)
    assert e.value.status == Status.INVALID_HANDLE
    hal.free(0, p)
    with pytest.raises(HalError, match="already freed"):
        hal.free(0, p)


def test_bogus_handles_are_errors_not_crashes(hal):
    bogus = ctypes.addressof(ctypes.create_string_buffer(64))
    for fn, args in (("stream_query", (bogus,)), ("stream_synchronize", (bogus,)),
                     ("event_query", (bogus,)), ("event_record", (bogus, bogus)),
                     ("stream_destroy", (bogus,))):
        assert hal.raw(fn, *args) == Status.INVALID_HANDLE, fn
    s = hal.stream_create(0)
    hal.stream_destroy(s)
    assert hal.raw("stream_query", s) == Status.INVALID_HANDLE
    # A stream used right before its destruction (the sim answers the last stream a thread
    # used from a per-thread cache) is refused after it too, and another one still works.
    s, other = hal.stream_create(0), hal.stream_create(0)
    assert hal.stream_query(s)
    hal.stream_synchronize(s)
    hal.stream_destroy(s)
    for fn in ("stream_query", "stream_synchronize"):
        assert hal.raw(fn, s) == Status.INVALID_HANDLE, fn
    assert hal.stream_query(other)
    hal.stream_destroy(other)


def test_async_work_really_is_asynchronous(hal):
    n = 64 << 20
    p = hal.malloc(0, n)
    s = hal.stream_create(0)
    try:
        for i in range(20):
            hal.memset_async(p, i, n, s)
        assert not hal.stream_query(s)  # 1.3 GB of memsets cannot be done already
        hal.stream_synchronize(s)
        assert hal.stream_query(s) and hal.read(p + n - 1, 1) == b"\x13"
    finally:
        hal.stream_destroy(s)
        hal.free(0, p)


def test_priorities_clamped(hal):
    assert hal.stream_priority_range() == (0, -2)
    s = hal.stream_create(0, -100)
    hal.stream_destroy(s)


def test_memcpy_out_of_bounds_is_refused(hal):
    p = hal.malloc(0, 100)
    buf = ctypes.create_string_buffer(200)
    try:
        with pytest.raises(HalError, match="not inside a live device allocation"):
            hal.memcpy(p, ctypes.addressof(buf), 101, MemcpyKind.HOST_TO_DEVICE)
        with pytest.raises(HalError) as e:
            hal.memcpy(p, ctypes.addressof(buf), 1, 9)
        assert e.value.status == Status.INVALID_VALUE
    finally:
        hal.free(0, p)


def test_out_of_memory_is_real_and_recovers():
    r = run_python(
        "import flagos_hal\n"
        "h = flagos_hal.load('sim')\n"
        "assert h.mem_get_info(0) == (1 << 20, 1 << 20)\n"
        "ps = [h.malloc(0, 256 << 10) for _ in range(4)]\n"
        "try:\n"
        "    h.malloc(0, 1)\n    raise SystemExit('no OOM')\n"
        "except flagos_hal.HalError as e:\n"
        "    assert e.status == flagos_hal.Status.OUT_OF_MEMORY, e\n"
        "h.free(0, ps[1]); h.free(0, ps[2])\n"
        "q = h.malloc(0, 512 << 10)\n"  # the two freed neighbours coalesced
        "assert q == ps[1], (q, ps)\n"
        "assert h.mem_get_info(1)[0] == 1 << 20\n"
        "print('ok')\n",
        env={"FLAGOS_SIM_MEMORY": "1MiB", "FLAGOS_SIM_DEVICES": "3"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.parametrize("text,expected", [("1048576", 1 << 20), ("64K", 64 << 10),
                                           ("2MiB", 2 << 20), ("1G", 1 << 30), ("3gib", 3 << 30)])
def test_memory_size_parsing(text, expected):
    r = run_python("import flagos_hal; print(flagos_hal.load('sim').mem_get_info(0)[1])",
                   env={"FLAGOS_SIM_MEMORY": text})
    assert r.returncode == 0 and int(r.stdout) == expected, r.stderr


def test_bad_env_warns_and_uses_defaults():
    r = run_python("import flagos_hal; h = flagos_hal.load('sim');"
                   "print(h.device_count(), h.mem_get_info(0)[1])",
                   env={"FLAGOS_SIM_MEMORY": "lots", "FLAGOS_SIM_DEVICES": "x"})
    assert r.returncode == 0 and r.stdout.split() == ["2", str(4 << 30)]
    assert "FLAGOS_SIM_MEMORY='lots'" in r.stderr and "FLAGOS_SIM_DEVICES='x'" in r.stderr


def test_fault_injection():
    r = run_python(
        "import ctypes, flagos_hal\n"
        "from flagos_hal import Status\n"
        "h = flagos_hal.load('sim')\n"
        "p1 = h.malloc(0, 64); p2 = h.malloc(0, 64)\n"
        "try:\n    h.malloc(0, 64); raise SystemExit('3rd malloc did not fail')\n"
        "except flagos_hal.HalError as e:\n"
        "    assert e.status == Status.OUT_OF_MEMORY and 'injected' in e.message, e\n"
        "h.malloc(0, 64)\n"
        "h.write(p1, b'a' * 64)\n"  # memcpy 1
        "src = ctypes.create_string_buffer(b'b' * 64, 64)\n"
        "st = h.raw('memcpy', p1, ctypes.addressof(src), 64, 1)\n"  # memcpy 2: fault
        "assert st == Status.DEVICE_FAULT, st\n"
        "assert h.read(p1, 64) == b'a' * 64\n"  # nothing was copied
        "assert h.raw('memset', p2, 0, 64) == Status.DEVICE_FAULT\n"
        "print('ok')\n",
        env={"FLAGOS_SIM_FAULT": "malloc:3,memcpy:2,memset:1"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_two_sim_instances_in_one_process(tmp_path, sim_path):
    copy = tmp_path / "libflagos_hal_sim_copy.so"
    shutil.copy(sim_path, copy)
    a, b = flagos_hal.load(sim_path), flagos_hal.load(str(copy))
    assert a.table.get_name is not None and ctypes.addressof(a.table) != ctypes.addressof(b.table)
    free_b = b.mem_get_info(0)[0]
    p = a.malloc(0, 16 << 20)
    try:
        assert b.mem_get_info(0)[0] == free_b  # separate pools
        assert b.pointer_attributes(p).type == PointerType.UNKNOWN
        assert a.pointer_attributes(p).type == PointerType.DEVICE
        q = b.malloc(0, 100)
        assert b.raw("free", 0, p) == Status.INVALID_HANDLE
        b.free(0, q)
    finally:
        a.free(0, p)


FAKE_HAL = r"""
#include "flagos_hal/flagos_hal.h"
static flagos_hal_table_t table = {(2u << 16) | 3u, sizeof(flagos_hal_table_t)};
FLAGOS_HAL_EXPORT flagos_status_t flagos_hal_get_table(uint32_t major,
                                                       const flagos_hal_table_t** out) {
  (void)major; *out = &table; return FLAGOS_SUCCESS;
}
"""


def test_abi_mismatch_names_library_and_versions(tmp_path):
    src = tmp_path / "fake.c"
    src.write_text(FAKE_HAL)
    lib = tmp_path / "libfake_hal.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", flagos_hal.get_include(), str(src), "-o",
                    str(lib)], check=True)
    with pytest.raises(flagos_hal.HalAbiError) as e:
        flagos_hal.load(str(lib))
    msg = str(e.value)
    assert str(lib) in msg and "expected 1.1" in msg and "found 2.3" in msg


def test_not_a_hal(tmp_path):
    lib = tmp_path / "libnothing.so"
    src = tmp_path / "n.c"
    src.write_text("int nothing(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    with pytest.raises(HalError, match="does not export flagos_hal_get_table"):
        flagos_hal.load(str(lib))


def test_exit_with_pending_work_does_not_hang():
    r = run_python("import flagos_hal\nh = flagos_hal.load('sim')\n"
                   "p = h.malloc(0, 64 << 20)\ns = h.stream_create(1)\n"
                   "for i in range(50): h.memset_async(p, i, 64 << 20, h.default_stream(0))\n"
                   "print('bye')\n", timeout=60)
    assert r.returncode == 0 and "bye" in r.stdout, r.stderr


class _SimRuntimeStream(ctypes.Structure):
    pass


_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_SimRuntimeStream._fields_ = [
    ("struct_size", ctypes.c_uint32), ("stream", ctypes.c_void_p),
    ("launch_host_func", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_SimRuntimeStream),
                                          _HOST_FN, ctypes.c_void_p)),
    ("control", ctypes.c_void_p),
    ("launch_host_task", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_SimRuntimeStream),
                                          _HOST_FN, ctypes.c_void_p, _HOST_FN))]


def test_host_tasks_run_once_or_at_each_replay_and_are_released_once(hal):
    # sim_runtime.h launch_host_task: a capture records the task; each replay runs it; its
    # data is released once, when the capture and the replay are gone.
    s = hal.stream_create(0)
    runs, released = [], []
    fn = _HOST_FN(lambda data: runs.append(data))
    release = _HOST_FN(lambda data: released.append(data))
    try:
        rt = ctypes.cast(hal.stream_native_handle(s), ctypes.POINTER(_SimRuntimeStream)).contents
        assert rt.launch_host_task(ctypes.byref(rt), fn, 1, release) == Status.SUCCESS
        hal.stream_synchronize(s)
        assert runs == [1] and released == [1]
        hal.begin_capture(s)
        assert rt.launch_host_task(ctypes.byref(rt), fn, 2, release) == Status.SUCCESS
        capture = hal.end_capture(s)
        hal.stream_synchronize(s)
        assert runs == [1] and released == [1]  # recorded, not run
        replay = hal.instantiate(capture)
        for _ in range(3):
            hal.replay(replay, s)
        hal.stream_synchronize(s)
        assert runs == [1, 2, 2, 2] and released == [1]
        hal.capture_destroy(capture)
        hal.replay_destroy(replay)
        hal.stream_synchronize(s)
        assert released == [1, 2]
    finally:
        hal.stream_destroy(s)


def test_native_handle_launches_host_work_in_stream_order(hal):
    # flagos_hal/sim_runtime.h: the native handle queues fn(data) on the stream's worker.
    n = 16 << 20
    p = hal.malloc(0, n)
    s = hal.stream_create(0)
    seen = []
    fn = _HOST_FN(lambda data: seen.append(hal.read(p + n - 1, 1)))  # runs after the memsets
    try:
        rt = ctypes.cast(hal.stream_native_handle(s), ctypes.POINTER(_SimRuntimeStream)).contents
        assert rt.struct_size >= ctypes.sizeof(_SimRuntimeStream) and rt.stream == s  # may grow
        for i in range(1, 4):
            hal.memset_async(p, i, n, s)
        assert rt.launch_host_func(ctypes.byref(rt), fn, None) == Status.SUCCESS
        hal.stream_synchronize(s)
        assert seen == [b"\x03"]
        stale = _SimRuntimeStream(rt.struct_size, ctypes.addressof(ctypes.create_string_buffer(64)),
                                  rt.launch_host_func)  # names no live stream
        assert rt.launch_host_func(ctypes.byref(stale), fn, None) == Status.INVALID_HANDLE
        assert seen == [b"\x03"]
    finally:
        hal.stream_destroy(s)
        hal.free(0, p)


# A host function on a fresh sim stream, reached through the stream's native handle (the
# sim runtime table, sim_runtime.h), as a kernel library launches one.
_HOST_FUNC_PRELUDE = """
import ctypes, threading
import flagos_hal
import flagos_hal.sim_control
from flagos_hal import HalError, Status

class RT(ctypes.Structure):
    pass
FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
RT._fields_ = [("struct_size", ctypes.c_uint32), ("stream", ctypes.c_void_p),
               ("launch_host_func", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(RT), FN,
                                                     ctypes.c_void_p))]
h = flagos_hal.load("sim")
ctl = flagos_hal.sim_control.SimControl(h)
base = ctl.live()[0]
s = h.stream_create(0)
rt = ctypes.cast(h.stream_native_handle(s), ctypes.POINTER(RT)).contents
done, seen = threading.Event(), []

def refused(call):
    try:
        call()
        seen.append("ran")
    except HalError as e:
        seen.append((e.status, e.message))
"""

_DESTROY_FROM_OWN_WORK = _HOST_FUNC_PRELUDE + """
def on_stream(_):
    refused(lambda: h.stream_destroy(s))
    done.set()
fn = FN(on_stream)
assert rt.launch_host_func(ctypes.byref(rt), fn, None) == Status.SUCCESS
assert done.wait(30)
status, message = seen[0]
assert status == Status.INVALID_VALUE, seen
assert "called from work running on this stream" in message, message
assert ctl.live()[0] == base + 1  # still live, and it still runs work
p = h.malloc(0, 64)
h.memset_async(p, 7, 64, s)
h.stream_synchronize(s)
assert h.read(p, 64) == bytes([7]) * 64
h.free(0, p)
h.stream_destroy(s)  # from this thread it goes
assert ctl.live()[0] == base
print("bye", flush=True)
"""

# Waits for the stream a host function runs on, from that host function: the event is
# recorded behind it, so every one of them would wait for the host function itself.
_WAIT_FROM_OWN_WORK = _HOST_FUNC_PRELUDE + """
e = h.event_create()
go = threading.Event()
def on_stream(_):
    go.wait(30)
    refused(lambda: h.stream_synchronize(s))
    refused(lambda: h.event_synchronize(e))
    refused(lambda: h.device_synchronize(0))
    done.set()
fn = FN(on_stream)
assert rt.launch_host_func(ctypes.byref(rt), fn, None) == Status.SUCCESS
h.event_record(e, s)
go.set()
assert done.wait(30), "a wait from the stream's own work hung"
for (status, message), fn_name in zip(seen, ("stream_synchronize", "event_synchronize",
                                             "stream_synchronize")):
    assert status == Status.INVALID_VALUE, seen
    assert "it would wait for itself" in message and fn_name in message, message
h.stream_synchronize(s)  # from this thread: waits, and the event is done
h.event_synchronize(e)
h.event_destroy(e)
h.stream_destroy(s)
assert ctl.live()[0] == base
print("bye", flush=True)
"""


def test_waits_from_a_streams_own_work_are_refused_not_a_hang():
    r = run_python(_WAIT_FROM_OWN_WORK, timeout=60)
    assert r.returncode == 0 and "bye" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_stream_destroy_from_its_own_work_is_refused_not_an_abort():
    # A stream's worker cannot join itself: destroying the stream from a host function
    # running on it used to drop the stream object with its worker thread still joinable,
    # which aborts the process ("terminate called without an active exception").
    r = run_python(_DESTROY_FROM_OWN_WORK, timeout=60)
    assert "terminate called" not in r.stderr, r.stderr
    assert r.returncode == 0 and "bye" in r.stdout, (r.returncode, r.stdout, r.stderr)
