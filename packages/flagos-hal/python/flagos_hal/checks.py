"""The conformance checks: each is a function of an opened Hal that raises on failure,
raises Skip when it does not apply, and may return a detail string.

They are run one per forked process by flagos_hal.conformance, so a crash fails one check.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flagos_hal.binding import (
    ABI_MAJOR,
    CAPTURE_FUNCTIONS,
    EVENT_BLOCKING_SYNC,
    EVENT_DISABLE_TIMING,
    GRAPH_FUNCTIONS,
    HOST_TASK_FUNCTIONS,
    KERNEL_FUNCTIONS,
    OPTIONAL_FUNCTIONS,
    TABLE_FUNCTIONS,
    DeviceProperties,
    Hal,
    HalError,
    MemcpyKind,
    NativeDevice,
    PointerAttributesStruct,
    PointerType,
    Status,
    version_string,
)

H2H, H2D, D2H, D2D = (MemcpyKind.HOST_TO_HOST, MemcpyKind.HOST_TO_DEVICE,
                      MemcpyKind.DEVICE_TO_HOST, MemcpyKind.DEVICE_TO_DEVICE)
SIZE_MAX = 2**64 - 1
ODD_SIZES = (1, 3, 4097, 65541)
ODD_OFFSETS = (0, 1, 7)
GUARD = 16  # bytes around every region, checked untouched
MiB = 1 << 20


class Skip(Exception):
    """The check does not apply to this HAL (e.g. needs two devices)."""


class CheckFailed(AssertionError):
    pass


@dataclass
class Check:
    name: str
    fn: Callable[[Hal], str | None]
    devices: int  # devices needed; fewer -> SKIP
    doc: str


CHECKS: list[Check] = []


def check(name: str, devices: int = 1):
    def register(fn):
        CHECKS.append(Check(name, fn, devices, (fn.__doc__ or "").strip()))
        return fn
    return register


def expect(cond, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def expect_status(got: int, want, what: str, hal: Hal | None = None) -> None:
    wants = want if isinstance(want, tuple) else (want,)
    if got in wants:
        return
    names = " or ".join(Status(w).name for w in wants)
    detail = f" ({hal.last_error_message()})" if hal is not None and got else ""
    got_name = Status(got).name if got in Status._value2member_map_ else str(got)
    raise CheckFailed(f"{what}: expected {names}, got {got_name}{detail}")


def expect_error(got: int, what: str) -> None:
    expect(got != Status.SUCCESS, f"{what}: expected an error status, got SUCCESS")


def expect_load_refusals(hal: Hal, function: str, fmt: str, what: str, short: int) -> None:
    """The refusals of a loader `function(device, format, bytes, size, &out)` (graph_load,
    module_load): an unknown format (named in the message), malformed bytes of `fmt`, a
    `short` prefix of them, a bad device, a NULL out-pointer; the out-parameter untouched."""
    junk = b"\x00not an image\xff" * 8
    buf = ctypes.create_string_buffer(junk, len(junk))
    out = ctypes.c_void_p()
    expect_status(hal.raw(function, 0, b"no-such-format-v0", buf, len(junk), ctypes.byref(out)),
                  Status.NOT_SUPPORTED, f"{function} of an unknown format", hal)
    expect("no-such-format-v0" in hal.last_error_message(), "the message does not name the format")
    expect_status(hal.raw(function, 0, fmt.encode(), buf, len(junk), ctypes.byref(out)),
                  Status.INVALID_VALUE, f"{function} of a malformed {fmt} {what}", hal)
    expect_status(hal.raw(function, 0, fmt.encode(), buf, short, ctypes.byref(out)),
                  Status.INVALID_VALUE, f"{function} of {short} bytes of a {what}", hal)
    expect_status(hal.raw(function, hal.device_count(), fmt.encode(), buf, len(junk), ctypes.byref(out)),
                  Status.INVALID_DEVICE, f"{function} on a bad device", hal)
    expect_status(hal.raw(function, 0, fmt.encode(), buf, len(junk), None),
                  Status.INVALID_VALUE, f"{function} with a NULL out-pointer", hal)
    expect(not out.value, f"a failed {function} wrote its out-parameter")


# ---- helpers -----------------------------------------------------------------------
def pattern(n: int, seed: int = 0) -> bytes:
    block = bytes((i * 131 + seed * 17 + 1) % 251 for i in range(min(n, 4099)))
    return (block * (n // len(block) + 1))[:n] if n else b""


class HostBuf:
    """Plain (pageable) host memory."""

    def __init__(self, data: bytes | int):
        size = data if isinstance(data, int) else len(data)
        self.buf = ctypes.create_string_buffer(size + 2 * GUARD)
        ctypes.memset(self.buf, 0xEE, size + 2 * GUARD)
        self.size = size
        if not isinstance(data, int):
            ctypes.memmove(self.addr, data, size)

    @property
    def addr(self) -> int:
        return ctypes.addressof(self.buf) + GUARD

    def data(self) -> bytes:
        return self.buf.raw[GUARD:GUARD + self.size]

    def guards_ok(self) -> bool:
        return self.buf.raw[:GUARD] == b"\xee" * GUARD and self.buf.raw[GUARD + self.size:] == \
            b"\xee" * GUARD


def copy(hal: Hal, dst: int, src: int, n: int, kind: MemcpyKind, stream: int | None) -> None:
    if stream is None:
        hal.memcpy(dst, src, n, kind)
    else:
        hal.memcpy_async(dst, src, n, kind, stream)
        hal.stream_synchronize(stream)


class DevBuf:
    """A device region with GUARD bytes of 0xEE on both sides."""

    def __init__(self, hal: Hal, device: int, size: int):
        self.hal, self.device, self.size = hal, device, size
        self.base = hal.malloc(device, size + 2 * GUARD)
        hal.memset(self.base, 0xEE, size + 2 * GUARD)
        self.addr = self.base + GUARD

    def whole(self) -> bytes:
        return self.hal.read(self.base, self.size + 2 * GUARD)

    def verify(self, want: bytes, what: str) -> None:
        got = self.whole()
        expect(got[:GUARD] == b"\xee" * GUARD and got[GUARD + self.size:] == b"\xee" * GUARD,
               f"{what}: bytes outside the region were overwritten")
        body = got[GUARD:GUARD + self.size]
        if body != want:
            first = next(i for i in range(len(want)) if body[i] != want[i])
            raise CheckFailed(f"{what}: wrong data at byte {first} of {len(want)}")

    def free(self) -> None:
        self.hal.free(self.device, self.base)


def streams_for(hal: Hal, device: int, use_async: bool):
    return hal.stream_create(device) if use_async else None


def busy_work(hal: Hal, stream: int, ptr: int, size: int, rounds: int) -> None:
    """Queue `rounds` memsets of `size` bytes; the last value written is rounds."""
    for i in range(1, rounds + 1):
        hal.memset_async(ptr, i, size, stream)


# ---- identity ------------------------------------------------------------------------
@check("identity", devices=0)
def _identity(hal: Hal):
    """Name, version and native device are reported."""
    expect(hal.name and hal.name == hal.name.lower() and " " not in hal.name,
           f"get_name must be a short lowercase name, got {hal.name!r}")
    expect(hal.version, "get_version returned an empty string")
    kind = hal.native_device()
    expect(kind in tuple(NativeDevice), f"get_native_device: unknown kind {kind}")
    return f"{hal.name} / {hal.version} / native {NativeDevice(kind).name}"


@check("abi_table", devices=0)
def _abi_table(hal: Hal):
    """ABI major matches, the table is complete, every function pointer is set (the optional
    graph runtime, kernel extension and stream capture: all of their functions or none;
    host tasks: one function)."""
    expect(hal.abi_version >> 16 == ABI_MAJOR, f"ABI {version_string(hal.abi_version)}")
    missing = [name for name, _ in TABLE_FUNCTIONS if not hal.has(name) and name not in OPTIONAL_FUNCTIONS]
    expect(not missing, f"NULL functions in the table: {', '.join(missing)}")
    extensions = []
    for what, functions in (("graph runtime", GRAPH_FUNCTIONS), ("kernel extension", KERNEL_FUNCTIONS),
                            ("stream capture", CAPTURE_FUNCTIONS),
                            ("host tasks", HOST_TASK_FUNCTIONS)):
        present = [name for name in functions if hal.has(name)]
        expect(not present or len(present) == len(functions),
               f"a partial {what}: {', '.join(present)} set, the others NULL")
        if present:
            extensions.append(what)
    return ", ".join([f"ABI {version_string(hal.abi_version)}, {hal.table.struct_size} bytes",
                      *extensions])


@check("error_strings", devices=0)
def _error_strings(hal: Hal):
    """Every status code has a text; unknown codes give "unknown error"."""
    for st in Status:
        expect(hal.error_string(st), f"no text for {st.name}")
    expect(hal.error_string(12345) == "unknown error",
           f"code 12345 gave {hal.error_string(12345)!r}, expected 'unknown error'")
    expect_status(hal.raw("get_error_string", 0, None), Status.INVALID_VALUE, "NULL text")


@check("device_count", devices=0)
def _device_count(hal: Hal):
    """get_device_count succeeds; devices 0..n-1 have properties."""
    n = hal.device_count()
    expect(n >= 0, f"negative device count {n}")
    for d in range(n):
        p = hal.device_properties(d)
        expect(p.name and p.total_memory > 0 and p.compute_units > 0,
               f"device {d}: incomplete properties name={p.name!r} total={p.total_memory} "
               f"units={p.compute_units}")
    return f"{n} devices" + (f", {hal.device_properties(0).name.decode()}" if n else "")


@check("properties_struct_size")
def _properties_struct_size(hal: Hal):
    """get_device_properties writes at most struct_size bytes."""
    cut = DeviceProperties.total_memory.offset
    raw = (ctypes.c_ubyte * (ctypes.sizeof(DeviceProperties) + 64))()
    ctypes.memset(raw, 0xCD, len(raw))
    ctypes.c_uint32.from_buffer(raw).value = cut
    hal.call("get_device_properties", 0, ctypes.cast(raw, ctypes.POINTER(DeviceProperties)))
    expect(bytes(raw[cut:]) == b"\xcd" * (len(raw) - cut),
           f"struct_size={cut}: the HAL wrote past it")
    expect(bytes(raw[4:cut]).split(b"\0")[0], "struct_size=264: name not filled")
    full = hal.device_properties(0)
    _, total = hal.mem_get_info(0)
    expect(abs(full.total_memory - total) <= total // 20,
           f"properties total_memory {full.total_memory} != mem_get_info total {total}")
    expect_status(hal.raw("get_device_properties", 0, None), Status.INVALID_VALUE, "NULL props")


@check("mem_get_info")
def _mem_get_info(hal: Hal):
    """free <= total; free drops by at least an allocation and comes back after free."""
    free0, total = hal.mem_get_info(0)
    expect(0 < free0 <= total, f"free {free0} total {total}")
    size = 64 * MiB
    p = hal.malloc(0, size)
    free1, _ = hal.mem_get_info(0)
    hal.free(0, p)
    free2, _ = hal.mem_get_info(0)
    expect(free0 - free1 >= size, f"free dropped by {free0 - free1} after a {size}-byte malloc")
    expect(free2 > free1, "free did not grow back after free()")
    return f"free {free0 / MiB:.0f} of {total / MiB:.0f} MiB"


# ---- devices and threads ---------------------------------------------------------------
@check("invalid_device_index", devices=0)
def _invalid_device(hal: Hal):
    """Device -1 and device_count give INVALID_DEVICE everywhere a device is taken."""
    n = hal.device_count()
    out_i, out_p, out_s = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_size_t()
    props = DeviceProperties(struct_size=ctypes.sizeof(DeviceProperties))
    for d in (-1, n, n + 7):
        calls = {
            "set_device": (d,),
            "get_device_properties": (d, ctypes.byref(props)),
            "device_synchronize": (d,),
            "mem_get_info": (d, ctypes.byref(out_s), ctypes.byref(out_s)),
            "malloc": (d, 64, ctypes.byref(out_p)),
            "stream_create": (d, 0, ctypes.byref(out_p)),
            "stream_get_default": (d, ctypes.byref(out_p)),
        }
        # Without a driver, NO_DEVICE is as right an answer as INVALID_DEVICE.
        want = Status.INVALID_DEVICE if n else (Status.INVALID_DEVICE, Status.NO_DEVICE)
        for fn, args in calls.items():
            expect_status(hal.raw(fn, *args), want, f"{fn}({d})", hal)
    if n:
        hal.call("get_device", ctypes.byref(out_i))
        expect(out_i.value == 0, "a failed set_device changed the current device")


@check("current_device_per_thread")
def _current_device(hal: Hal):
    """get/set_device are per host thread; the initial device is 0."""
    n = hal.device_count()
    expect(hal.get_device() == 0, f"initial device {hal.get_device()}")
    seen = {}

    def worker():
        seen["initial"] = hal.get_device()
        hal.set_device(n - 1)
        seen["after"] = hal.get_device()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    expect(seen == {"initial": 0, "after": n - 1}, f"thread saw {seen}")
    expect(hal.get_device() == 0, "set_device in another thread changed this thread's device")
    hal.set_device(n - 1)
    expect(hal.get_device() == n - 1, "set_device did not stick")


@check("null_out_arguments", devices=0)
def _null_outs(hal: Hal):
    """NULL out-pointers give INVALID_VALUE, not a crash."""
    calls = {
        "get_name": (None,), "get_version": (None,), "get_device_count": (None,),
        "get_device": (None,), "get_native_device": (None,),
        "stream_get_priority_range": (None, None), "event_create": (0, None),
    }
    if hal.device_count():
        calls.update({"malloc": (0, 64, None), "mem_get_info": (0, None, None),
                      "stream_create": (0, 0, None), "stream_get_default": (0, None),
                      "host_malloc": (64, None), "pointer_get_attributes": (None, None)})
    for fn, args in calls.items():
        expect_status(hal.raw(fn, *args), Status.INVALID_VALUE, f"{fn} with NULL output", hal)


@check("device_isolation", devices=2)
def _device_isolation(hal: Hal):
    """Memory of device 0 is not device 1's; allocating on one leaves the other's free memory."""
    free1, _ = hal.mem_get_info(1)
    p0 = hal.malloc(0, 32 * MiB)
    p1 = hal.malloc(1, MiB)
    try:
        expect(hal.mem_get_info(1)[0] >= free1 - 2 * MiB,
               "allocating on device 0 reduced device 1's free memory")
        a0, a1 = hal.pointer_attributes(p0 + 100), hal.pointer_attributes(p1)
        expect(a0.type == PointerType.DEVICE and a0.device == 0, f"device 0 pointer: {a0}")
        expect(a1.type == PointerType.DEVICE and a1.device == 1, f"device 1 pointer: {a1}")
        s1 = hal.stream_create(1)
        expect(hal.stream_device(s1) == 1, "stream created on device 1 reports another device")
        hal.stream_destroy(s1)
    finally:
        hal.free(0, p0)
        hal.free(1, p1)


@check("threads_alloc_free")
def _threads(hal: Hal):
    """8 threads allocate, write, read back and free at once, on every device."""
    n = hal.device_count()
    errors: list[str] = []

    def worker(t: int):
        try:
            hal.set_device(t % n)
            for i in range(60):
                size = 1 + (t * 7919 + i * 104729) % (256 * 1024)
                data = pattern(size, seed=t * 1000 + i)
                p = hal.malloc(t % n, size)
                hal.write(p, data)
                if hal.read(p, size) != data:
                    errors.append(f"thread {t} iteration {i}: data mismatch ({size} bytes)")
                hal.free(t % n, p)
        except Exception as e:  # noqa: BLE001 - reported as the check's failure
            errors.append(f"thread {t}: {e}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors, "; ".join(errors[:3]))
    return "8 threads x 60 alloc/write/read/free"


# ---- allocations -----------------------------------------------------------------------
@check("malloc_zero_size")
def _malloc_zero(hal: Hal):
    """malloc(0) and host_malloc(0) succeed with NULL; free(NULL) succeeds."""
    for fn, args in (("malloc", (0, 0)), ("host_malloc", (0,))):
        out = ctypes.c_void_p(0xDEAD)
        expect_status(hal.raw(fn, *args, ctypes.byref(out)), Status.SUCCESS, f"{fn}(size 0)", hal)
        expect(out.value is None, f"{fn}(size 0) returned {out.value!r}, not NULL")
    expect_status(hal.raw("free", 0, None), Status.SUCCESS, "free(NULL)", hal)
    expect_status(hal.raw("host_free", None), Status.SUCCESS, "host_free(NULL)", hal)


@check("malloc_oversized")
def _malloc_oversized(hal: Hal):
    """Oversized allocations give OUT_OF_MEMORY, leave *ptr alone, and the HAL still works."""
    _, total = hal.mem_get_info(0)
    for size in (SIZE_MAX, SIZE_MAX - 255, total + 1, 2 * total, 1 << 62):
        out = ctypes.c_void_p(0xDEAD)
        expect_status(hal.raw("malloc", 0, size, ctypes.byref(out)), Status.OUT_OF_MEMORY,
                      f"malloc({size})", hal)
        expect(out.value == 0xDEAD, f"malloc({size}) failed but wrote *ptr")
        expect(hal.last_error_message(), f"malloc({size}) failed without a last error message")
    out = ctypes.c_void_p(0xDEAD)
    expect_status(hal.raw("host_malloc", SIZE_MAX, ctypes.byref(out)), Status.OUT_OF_MEMORY,
                  "host_malloc(SIZE_MAX)", hal)
    p = hal.malloc(0, 4096)
    hal.free(0, p)


@check("malloc_alignment")
def _malloc_alignment(hal: Hal):
    """Allocations are 256-byte aligned, disjoint, and reported as device memory."""
    sizes = (1, 3, 255, 256, 257, 4097, MiB + 1)
    ptrs = [hal.malloc(0, s) for s in sizes]
    try:
        for p, s in zip(ptrs, sizes):
            expect(p % 256 == 0, f"malloc({s}) returned {p:#x}, not 256-byte aligned")
        spans = sorted(zip(ptrs, sizes))
        for (a, sa), (b, _) in itertools.pairwise(spans):
            expect(a + sa <= b, f"allocations overlap at {a:#x}+{sa} and {b:#x}")
    finally:
        for p in ptrs:
            hal.free(0, p)


@check("free_invalid_pointer")
def _free_invalid(hal: Hal):
    """free of a foreign, inner or already freed pointer is an error code, not a crash."""
    host = ctypes.create_string_buffer(4096)
    expect_status(hal.raw("free", 0, ctypes.addressof(host)), Status.INVALID_HANDLE,
                  "free(host pointer)", hal)
    p = hal.malloc(0, 4096)
    expect_error(hal.raw("free", 0, p + 256), "free(pointer inside an allocation)")
    hal.free(0, p)
    expect_error(hal.raw("free", 0, p), "double free")
    expect_error(hal.raw("host_free", ctypes.addressof(host)), "host_free(plain host pointer)")


@check("pinned_host")
def _pinned_host(hal: Hal):
    """host_malloc memory is writable, identified as pinned, and usable for async copies."""
    n = 3 * MiB + 5
    h = hal.host_malloc(n)
    d = hal.malloc(0, n)
    s = hal.stream_create(0)
    try:
        data = pattern(n, 3)
        ctypes.memmove(h, data, n)
        a = hal.pointer_attributes(h + n - 1)
        expect(a.type == PointerType.PINNED_HOST and a.base == h and a.size >= n,
               f"inner pinned pointer: {a}")
        hal.memcpy_async(d, h, n, H2D, s)
        hal.stream_synchronize(s)
        ctypes.memset(h, 0, n)
        hal.memcpy_async(h, d, n, D2H, s)
        hal.stream_synchronize(s)
        expect(ctypes.string_at(h, n) == data, "pinned round trip lost data")
    finally:
        hal.stream_destroy(s)
        hal.free(0, d)
        hal.host_free(h)
    expect(hal.pointer_attributes(h).type != PointerType.PINNED_HOST, "freed pinned still pinned")


@check("pointer_attributes")
def _pointer_attributes(hal: Hal):
    """Device pointers (base and inner) report device, base, size; others are unknown."""
    size = 10000
    p = hal.malloc(0, size)
    for q in (p, p + 1, p + size - 1):
        a = hal.pointer_attributes(q)
        expect(a.type == PointerType.DEVICE and a.device == 0 and a.base == p and a.size >= size,
               f"pointer {q - p} bytes into a {size}-byte allocation: {a}")
    host = ctypes.create_string_buffer(64)
    a = hal.pointer_attributes(ctypes.addressof(host))
    expect(a.type == PointerType.UNKNOWN and a.device == -1, f"plain host pointer: {a}")
    hal.free(0, p)
    expect(hal.pointer_attributes(p).type != PointerType.DEVICE, "freed pointer still device")
    expect_status(hal.raw("pointer_get_attributes", p, None), Status.INVALID_VALUE, "NULL attr")
    out = PointerAttributesStruct()
    expect_status(hal.raw("pointer_get_attributes", None, ctypes.byref(out)), Status.SUCCESS,
                  "attributes of NULL", hal)
    expect(out.type == PointerType.UNKNOWN, "NULL reported as allocated")


# ---- copies and memsets ----------------------------------------------------------------
def _roundtrip_h2d_d2h(hal: Hal, use_async: bool):
    s = streams_for(hal, 0, use_async)
    for size in ODD_SIZES:
        for off in ODD_OFFSETS:
            data = pattern(size, off)
            src, back = HostBuf(data), HostBuf(size)
            dev = DevBuf(hal, 0, size + off)
            copy(hal, dev.addr + off, src.addr, size, H2D, s)
            dev.verify(b"\xee" * off + data, f"H2D {size} bytes at offset {off}")
            copy(hal, back.addr, dev.addr + off, size, D2H, s)
            expect(back.data() == data and back.guards_ok(), f"D2H {size} bytes at offset {off}")
            dev.free()
    if s:
        hal.stream_destroy(s)


def _roundtrip_d2d(hal: Hal, use_async: bool, dst_device: int):
    s = streams_for(hal, 0, use_async)
    for size in ODD_SIZES:
        for off in ODD_OFFSETS:
            data = pattern(size, off + 1)
            a, b = DevBuf(hal, 0, size + 7), DevBuf(hal, dst_device, size + off)
            hal.write(a.addr + 7, data)
            copy(hal, b.addr + off, a.addr + 7, size, D2D, s)
            b.verify(b"\xee" * off + data, f"D2D {size} bytes 0->{dst_device} at offset {off}")
            a.free()
            b.free()
    if s:
        hal.stream_destroy(s)


def _roundtrip_h2h(hal: Hal, use_async: bool):
    s = streams_for(hal, 0, use_async)
    for size in ODD_SIZES:
        for off in ODD_OFFSETS:
            data = pattern(size, off + 2)
            src, dst = HostBuf(b"x" * off + data), HostBuf(size)
            copy(hal, dst.addr, src.addr + off, size, H2H, s)
            expect(dst.data() == data and dst.guards_ok(), f"H2H {size} bytes at offset {off}")
    if s:
        hal.stream_destroy(s)


for _async in (False, True):
    _mode = "async" if _async else "sync"
    check(f"memcpy_h2d_d2h_{_mode}")(
        lambda hal, a=_async: _roundtrip_h2d_d2h(hal, a))
    check(f"memcpy_d2d_{_mode}")(lambda hal, a=_async: _roundtrip_d2d(hal, a, 0))
    check(f"memcpy_h2h_{_mode}")(lambda hal, a=_async: _roundtrip_h2h(hal, a))
    check(f"memcpy_cross_device_{_mode}", devices=2)(
        lambda hal, a=_async: _roundtrip_d2d(hal, a, 1))


@check("memcpy_zero_size")
def _memcpy_zero(hal: Hal):
    """Zero-byte copies and memsets succeed, whatever the pointers."""
    s = hal.default_stream(0)
    for kind in MemcpyKind:
        expect_status(hal.raw("memcpy", None, None, 0, int(kind)), Status.SUCCESS,
                      f"memcpy 0 bytes {kind.name}", hal)
        expect_status(hal.raw("memcpy_async", None, None, 0, int(kind), s), Status.SUCCESS,
                      f"memcpy_async 0 bytes {kind.name}", hal)
    expect_status(hal.raw("memset", None, 0, 0), Status.SUCCESS, "memset 0 bytes", hal)
    expect_status(hal.raw("memset_async", None, 0, 0, s), Status.SUCCESS, "memset_async 0", hal)
    hal.stream_synchronize(s)


@check("memcpy_invalid_kind")
def _memcpy_kind(hal: Hal):
    """An unknown memcpy kind is INVALID_VALUE."""
    p = hal.malloc(0, 256)
    try:
        expect_status(hal.raw("memcpy", p, p + 128, 64, 7), Status.INVALID_VALUE, "kind 7", hal)
        expect_status(hal.raw("memcpy_async", p, p + 128, 64, -1, hal.default_stream(0)),
                      Status.INVALID_VALUE, "kind -1", hal)
    finally:
        hal.free(0, p)


@check("memcpy_large")
def _memcpy_large(hal: Hal):
    """A 64 MiB round trip through pinned memory keeps every byte; reports the bandwidth."""
    n = 64 * MiB
    data = os.urandom(n)
    d = hal.malloc(0, n)
    h = hal.host_malloc(n)
    try:
        best = {H2D: float("inf"), D2H: float("inf")}
        for _ in range(3):
            ctypes.memmove(h, data, n)
            t0 = time.perf_counter()
            hal.memcpy(d, h, n, H2D)
            t1 = time.perf_counter()
            ctypes.memset(h, 0, n)
            t2 = time.perf_counter()
            hal.memcpy(h, d, n, D2H)
            t3 = time.perf_counter()
            best = {H2D: min(best[H2D], t1 - t0), D2H: min(best[D2H], t3 - t2)}
            expect(ctypes.string_at(h, n) == data, "64 MiB round trip lost data")
    finally:
        hal.free(0, d)
        hal.host_free(h)
    return f"H2D {n / best[H2D] / 1e9:.1f} GB/s, D2H {n / best[D2H] / 1e9:.1f} GB/s (pinned)"


def _memset(hal: Hal, use_async: bool):
    s = streams_for(hal, 0, use_async)
    for size in ODD_SIZES:
        for off in ODD_OFFSETS:
            dev = DevBuf(hal, 0, size + off)
            if s:
                hal.memset_async(dev.addr + off, 0x1AB, size, s)  # (unsigned char)0x1AB
                hal.stream_synchronize(s)
            else:
                hal.memset(dev.addr + off, 0x1AB, size)
            dev.verify(b"\xee" * off + b"\xab" * size, f"memset {size} bytes at offset {off}")
            dev.free()
    if s:
        hal.stream_destroy(s)


check("memset_sync")(lambda hal: _memset(hal, False))
check("memset_async")(lambda hal: _memset(hal, True))


# ---- streams -----------------------------------------------------------------------
@check("sync_ops_after_default_stream")
def _sync_after_default(hal: Hal):
    """Sync memcpy/memset are ordered after work queued on the default stream."""
    n = 32 * MiB
    d = hal.malloc(0, n)
    try:
        s = hal.default_stream(0)
        busy_work(hal, s, d, n, 6)
        tail = hal.read(d + n - 4096, 4096)
        expect(tail == b"\x06" * 4096, "sync memcpy overtook queued default-stream work")
        hal.memset_async(d, 1, n, s)
        hal.memset(d, 2, 4096)
        expect(hal.read(d, 8) == b"\x02" * 8, "sync memset overtook default-stream work")
    finally:
        hal.free(0, d)


@check("stream_ordering")
def _stream_ordering(hal: Hal):
    """A long chain of async memsets/copies on one stream runs in order."""
    slot, rounds = 4096 + 3, 120
    s = hal.stream_create(0)
    a = hal.malloc(0, slot)
    c = hal.malloc(0, slot * rounds)
    host = hal.host_malloc(slot * rounds)
    try:
        for i in range(rounds):
            hal.memset_async(a, i, slot, s)
            hal.memcpy_async(c + i * slot, a, slot, D2D, s)
        hal.memcpy_async(host, c, slot * rounds, D2H, s)
        hal.stream_synchronize(s)
        expect(hal.stream_query(s), "stream_query not SUCCESS after synchronize")
        got = ctypes.string_at(host, slot * rounds)
        for i in range(rounds):
            expect(got[i * slot:(i + 1) * slot] == bytes([i]) * slot,
                   f"slot {i} holds the wrong value: work ran out of order")
    finally:
        hal.stream_destroy(s)
        hal.free(0, a)
        hal.free(0, c)
        hal.host_free(host)
    return f"{2 * rounds + 1} ops in order"


@check("stream_lifecycle")
def _stream_lifecycle(hal: Hal):
    """create/query/destroy; destroy with pending work lets the work finish."""
    n = 16 * MiB
    d = hal.malloc(0, n)
    try:
        for _ in range(20):
            hal.stream_destroy(hal.stream_create(0))
        s = hal.stream_create(0)
        expect(hal.stream_query(s), "a new stream is not idle")
        busy_work(hal, s, d, n, 5)
        hal.stream_destroy(s)
        hal.device_synchronize(0)
        expect(hal.read(d + n - 16, 16) == b"\x05" * 16, "work pending at destroy was lost")
        expect(hal.stream_native_handle(hal.default_stream(0)) >= 0, "native handle")
    finally:
        hal.free(0, d)


@check("stream_priority_range")
def _priority_range(hal: Hal):
    """least >= greatest; any priority is accepted (clamped) and the stream works."""
    least, greatest = hal.stream_priority_range()
    expect(least >= greatest, f"least {least} < greatest {greatest}")
    d = hal.malloc(0, 256)
    try:
        for prio in (least, greatest, least + 100, greatest - 100, (least + greatest) // 2):
            s = hal.stream_create(0, prio)
            hal.memset_async(d, 9, 256, s)
            hal.stream_synchronize(s)
            hal.stream_destroy(s)
    finally:
        hal.free(0, d)
    return f"least {least}, greatest {greatest}"


@check("default_stream")
def _default_stream(hal: Hal):
    """The default stream is stable per device, reports its device, cannot be destroyed."""
    n = hal.device_count()
    defaults = [hal.default_stream(d) for d in range(n)]
    expect(defaults == [hal.default_stream(d) for d in range(n)], "default stream changed")
    expect(len(set(defaults)) == n, "devices share a default stream")
    for d, s in enumerate(defaults):
        expect(hal.stream_device(s) == d, f"default stream of device {d} reports another device")
    expect_error(hal.raw("stream_destroy", defaults[0]), "destroying the default stream")
    hal.stream_synchronize(defaults[0])


@check("cross_stream_event_wait")
def _cross_stream(hal: Hal):
    """Stream B waits for an event recorded on stream A, then reads A's result."""
    n = 32 * MiB
    a, b = hal.stream_create(0), hal.stream_create(0)
    e = hal.event_create()
    d = hal.malloc(0, n)
    host = hal.host_malloc(n)
    try:
        hal.memset(d, 0, n)
        t0 = time.perf_counter()
        busy_work(hal, a, d, n, 8)
        hal.event_record(e, a)
        hal.stream_wait_event(b, e)
        hal.memcpy_async(host, d, n, D2H, b)
        host_time = time.perf_counter() - t0
        hal.stream_synchronize(b)
        expect(hal.event_query(e), "B finished but the event it waited for is not complete")
        got = ctypes.string_at(host, n)
        expect(got.count(8) == n, "stream B read before stream A's work had completed")
    finally:
        for s in (a, b):
            hal.stream_destroy(s)
        hal.event_destroy(e)
        hal.free(0, d)
        hal.host_free(host)
    return f"enqueue took {host_time * 1e3:.2f} ms"


@check("event_query_synchronize")
def _event_query(hal: Hal):
    """Never-recorded events are complete; synchronize waits for the captured work."""
    e = hal.event_create()
    expect(hal.event_query(e), "a never-recorded event is not complete")
    hal.event_synchronize(e)
    n = 32 * MiB
    d = hal.malloc(0, n)
    s = hal.stream_create(0)
    try:
        busy_work(hal, s, d, n, 4)
        hal.event_record(e, s)
        hal.memset_async(d, 9, n, s)  # after the capture
        hal.event_synchronize(e)
        expect(hal.event_query(e), "event not complete after event_synchronize")
        hal.stream_synchronize(s)
        hal.event_record(e, s)  # re-record on an idle stream
        hal.event_synchronize(e)
        expect(hal.event_query(e), "re-recorded event not complete")
    finally:
        hal.stream_destroy(s)
        hal.event_destroy(e)
        hal.free(0, d)


@check("event_elapsed_time")
def _elapsed(hal: Hal):
    """Elapsed times are >= 0, ordered, and refused on timing-disabled events."""
    n = 32 * MiB
    s = hal.stream_create(0)
    e0, e1, e2 = (hal.event_create() for _ in range(3))
    nt = hal.event_create(EVENT_DISABLE_TIMING)
    d = hal.malloc(0, n)
    try:
        hal.event_record(e0, s)
        hal.memset_async(d, 1, 256, s)
        hal.event_record(e1, s)
        busy_work(hal, s, d, n, 4)
        hal.event_record(e2, s)
        hal.event_record(nt, s)
        hal.event_synchronize(e2)
        t01, t12, t02 = hal.elapsed_time(e0, e1), hal.elapsed_time(e1, e2), hal.elapsed_time(e0, e2)
        expect(t01 >= 0 and t12 >= 0, f"negative elapsed time: {t01}, {t12}")
        expect(t02 >= t01 - 1e-3 and t02 >= t12 - 1e-3, f"t02={t02} < t01={t01} or t12={t12}")
        expect(abs(hal.elapsed_time(e1, e1)) < 1e-3, "elapsed(e, e) != 0")
        hal.event_synchronize(nt)
        expect_error(hal.raw("event_elapsed_time", ctypes.byref(ctypes.c_float()), e0, nt),
                     "elapsed time with a timing-disabled event")
    finally:
        hal.stream_destroy(s)
        for e in (e0, e1, e2, nt):
            hal.event_destroy(e)
        hal.free(0, d)
    return f"small op {t01:.3f} ms, 4x32 MiB memset {t12:.3f} ms"


@check("event_flags")
def _event_flags(hal: Hal):
    """Events with DISABLE_TIMING and BLOCKING_SYNC record and synchronize."""
    s = hal.default_stream(0)
    for flags in (EVENT_DISABLE_TIMING, EVENT_BLOCKING_SYNC,
                  EVENT_DISABLE_TIMING | EVENT_BLOCKING_SYNC):
        e = hal.event_create(flags)
        hal.event_record(e, s)
        hal.event_synchronize(e)
        expect(hal.event_query(e), f"flags {flags}: not complete after synchronize")
        hal.event_destroy(e)


@check("device_synchronize")
def _device_synchronize(hal: Hal):
    """device_synchronize waits for every stream of the device."""
    n = 16 * MiB
    streams = [hal.stream_create(0) for _ in range(3)] + [hal.default_stream(0)]
    bufs = [hal.malloc(0, n) for _ in streams]
    try:
        for s, d in zip(streams, bufs):
            busy_work(hal, s, d, n, 3)
        hal.device_synchronize(0)
        for s in streams:
            expect(hal.stream_query(s), "a stream still busy after device_synchronize")
    finally:
        for s in streams[:-1]:
            hal.stream_destroy(s)
        for d in bufs:
            hal.free(0, d)


@check("invalid_handles")
def _invalid_handles(hal: Hal):
    """NULL events are refused with an error code, not a crash."""
    s = hal.default_stream(0)
    for fn, args in (("event_query", (None,)), ("event_synchronize", (None,)),
                     ("event_record", (None, s)), ("event_destroy", (None,)),
                     ("stream_wait_event", (s, None))):
        expect_error(hal.raw(fn, *args), f"{fn} with a NULL event")


@check("last_error_message")
def _last_error(hal: Hal):
    """After a failure the thread's last error message is set; it is per thread."""
    expect_status(hal.raw("malloc", 0, SIZE_MAX, ctypes.byref(ctypes.c_void_p())),
                  Status.OUT_OF_MEMORY, "malloc(SIZE_MAX)")
    mine = hal.last_error_message()
    expect(mine, "no last error message after a failed malloc")
    other = {}

    def worker():
        other["fresh"] = hal.last_error_message()
        hal.raw("set_device", -1)
        other["after"] = hal.last_error_message()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    expect(other["fresh"] == "", f"a fresh thread sees {other['fresh']!r}")
    expect(other["after"] and other["after"] != mine, "set_device(-1) left no distinct message")
    expect(hal.last_error_message() == mine, "another thread's failure changed this thread's")
    try:
        hal.set_device(-1)
    except HalError as e:
        expect(hal.name in str(e) and "set_device" in str(e), f"HalError text: {e}")
    return f"e.g. {mine!r}"


# The optional graph runtime's and kernel extension's checks register themselves here,
# after the ones above.
from flagos_hal import (  # noqa: F401
    capture_checks,
    graph_checks,
    host_task_checks,
    kernel_checks,
    tensor_descriptor_checks,
)
