"""Conformance checks of the optional kernel extension (ABI 1.2: kernel_*, module_*,
function_set_shared_memory, launch_kernel).

They skip on a HAL without one. The checks that launch need an image of the suite's
kernels in a format the HAL loads: the simulator's (flagos-sim-kernels-v1, a library built
with flagos-hal) and PTX (written below, JIT-compiled by a CUDA driver) are known; for
another format they skip, naming it.

The kernels, the same on every device (one program is one block of ``block[0]`` threads):
- ``vector_add(const float* a, const float* b, float* out, int64 n)``: out = a + b below n;
- ``program_ids(uint32* out)``: out[p] = p, p the block's linear index in the grid (x fastest).
"""

from __future__ import annotations

import ctypes
import struct

from flagos_hal._bundled import lib_dir
from flagos_hal.binding import Hal, HalError, MemcpyKind, Status
from flagos_hal.checks import Skip, check, expect, expect_load_refusals, expect_status

SIM_FORMAT = "flagos-sim-kernels-v1"
SIM_IMAGE = "libflagos_sim_conformance_kernels.so"

# sm_50 and later (the driver compiles it for the device's architecture).
PTX = r"""
.version 7.0
.target sm_50
.address_size 64

.visible .entry vector_add(.param .u64 p_a, .param .u64 p_b, .param .u64 p_out, .param .u64 p_n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<13>;
    ld.param.u64 %rd1, [p_a];
    ld.param.u64 %rd2, [p_b];
    ld.param.u64 %rd3, [p_out];
    ld.param.u64 %rd4, [p_n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    cvt.s64.s32 %rd5, %r4;
    setp.ge.s64 %p1, %rd5, %rd4;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd6, %rd1;
    cvta.to.global.u64 %rd7, %rd2;
    cvta.to.global.u64 %rd8, %rd3;
    shl.b64 %rd9, %rd5, 2;
    add.s64 %rd10, %rd6, %rd9;
    ld.global.f32 %f1, [%rd10];
    add.s64 %rd11, %rd7, %rd9;
    ld.global.f32 %f2, [%rd11];
    add.f32 %f3, %f1, %f2;
    add.s64 %rd12, %rd8, %rd9;
    st.global.f32 [%rd12], %f3;
DONE:
    ret;
}

.visible .entry program_ids(.param .u64 p_out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<5>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %tid.y;
    or.b32 %r1, %r1, %r2;
    mov.u32 %r2, %tid.z;
    or.b32 %r1, %r1, %r2;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ctaid.y;
    mov.u32 %r5, %ctaid.z;
    mov.u32 %r6, %nctaid.x;
    mov.u32 %r7, %nctaid.y;
    mad.lo.u32 %r8, %r5, %r7, %r4;
    mad.lo.u32 %r9, %r8, %r6, %r3;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r9, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r9;
DONE:
    ret;
}
"""


def _needs_kernels(hal: Hal) -> None:
    if not hal.has_kernels():
        raise Skip("the HAL has no kernel extension (optional, ABI 1.2)")


def _image(hal: Hal) -> tuple[str, bytes]:
    """The suite's kernels in a format this HAL loads: (format, image)."""
    formats = hal.kernel_formats()
    if SIM_FORMAT in formats:
        path = lib_dir() / SIM_IMAGE
        if not path.is_file():
            raise AssertionError(f"{SIM_IMAGE} is not built in this installation (missing {path})")
        return SIM_FORMAT, path.read_bytes()
    if "ptx" in formats:
        return "ptx", PTX.encode()
    raise Skip(f"no image of the conformance kernels in a format this HAL loads ({', '.join(formats)})")


@check("kernel_target")
def _kernel_target(hal: Hal):
    """kernel_get_formats lists a format; every device describes itself as a target (warp
    size and limits of at least 1); NULL pointers and bad devices fail cleanly."""
    _needs_kernels(hal)
    formats = hal.kernel_formats()
    expect(formats and all(f and " " not in f for f in formats), f"formats {formats!r}")
    expect_status(hal.raw("kernel_get_formats", None), Status.INVALID_VALUE, "NULL formats", hal)
    targets = [hal.kernel_target(d) for d in range(hal.device_count())]
    for d, t in enumerate(targets):
        expect(t.warp_size >= 1 and t.max_threads_per_block >= 1 and t.arch,
               f"device {d}: target {t}")
    expect_status(hal.raw("kernel_get_target", hal.device_count(), None), (Status.INVALID_VALUE,
                  Status.INVALID_DEVICE), "kernel_get_target with NULL", hal)
    try:
        hal.kernel_target(hal.device_count())
        raise AssertionError("kernel_get_target of a device out of range succeeded")
    except HalError as e:
        expect(e.status == Status.INVALID_DEVICE, f"device out of range: {e}")
    t = targets[0]
    return f"{', '.join(formats)}; {t.backend or 'no Triton backend'} {t.arch}, warp {t.warp_size}"


@check("module_load_errors")
def _module_load_errors(hal: Hal):
    """Unknown formats, malformed images, unknown kernels and handles fail cleanly, and
    leave the module usable."""
    _needs_kernels(hal)
    fmt, image = _image(hal)
    expect_load_refusals(hal, "module_load", fmt, "image", short=0)
    buf = ctypes.create_string_buffer(64)
    module = hal.module_load(0, fmt, image)
    fn = ctypes.c_void_p()
    expect_status(hal.raw("module_get_function", module, b"no_such_kernel", ctypes.byref(fn)),
                  Status.INVALID_VALUE, "module_get_function of an unknown kernel", hal)
    expect(not fn.value, "a failed module_get_function wrote its out-parameter")
    first = hal.module_function(module, "vector_add")
    expect(hal.module_function(module, "vector_add") == first,
           "module_get_function gave two handles for one kernel")
    bogus = ctypes.addressof(buf)
    expect_status(hal.raw("module_get_function", bogus, b"vector_add", ctypes.byref(fn)),
                  Status.INVALID_HANDLE, "module_get_function of an unknown module", hal)
    hal.module_unload(module)
    expect_status(hal.raw("module_unload", module), Status.INVALID_HANDLE, "module_unload twice", hal)
    stream = hal.default_stream(0)
    expect_status(hal.raw_launch(first, (1, 1, 1), (1, 1, 1), 0, [ctypes.c_void_p(0)] * 3
                                 + [ctypes.c_int64(0)], stream),
                  Status.INVALID_HANDLE, "launch_kernel of a function of an unloaded module", hal)
    return fmt


def _floats(values) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


@check("launch_kernel")
def _launch_kernel(hal: Hal):
    """A launch is stream-ordered (inputs copied on the stream before it, the result read
    after it, the module unloaded with the launch pending) and computes what the kernel
    says; a grid of several dimensions runs every program once."""
    _needs_kernels(hal)
    fmt, image = _image(hal)
    module = hal.module_load(0, fmt, image)
    add = hal.module_function(module, "vector_add")
    ids = hal.module_function(module, "program_ids")
    n, block = 1000, 64
    a = [float(i % 97) / 8 for i in range(n)]
    b = [float((i * 7) % 31) - 15 for i in range(n)]
    stream = hal.stream_create(0)
    da, db, dout = (hal.malloc(0, n * 4) for _ in range(3))
    grid = (3, 4, 2)
    programs = grid[0] * grid[1] * grid[2]
    dids = hal.malloc(0, programs * 4)
    host_a = ctypes.create_string_buffer(_floats(a), n * 4)
    host_b = ctypes.create_string_buffer(_floats(b), n * 4)
    host_out = ctypes.create_string_buffer(n * 4)
    host_ids = ctypes.create_string_buffer(programs * 4)
    hal.memset(dout, 0xEE, n * 4)
    hal.memset(dids, 0xFF, programs * 4)
    h2d, d2h = MemcpyKind.HOST_TO_DEVICE, MemcpyKind.DEVICE_TO_HOST
    hal.memcpy_async(da, ctypes.addressof(host_a), n * 4, h2d, stream)
    hal.memcpy_async(db, ctypes.addressof(host_b), n * 4, h2d, stream)
    hal.launch(add, ((n + block - 1) // block, 1, 1), (block, 1, 1), 0,
               [ctypes.c_void_p(da), ctypes.c_void_p(db), ctypes.c_void_p(dout), ctypes.c_int64(n)],
               stream)
    hal.launch(ids, grid, (32, 1, 1), 0, [ctypes.c_void_p(dids)], stream)
    hal.memcpy_async(ctypes.addressof(host_out), dout, n * 4, d2h, stream)
    hal.memcpy_async(ctypes.addressof(host_ids), dids, programs * 4, d2h, stream)
    hal.module_unload(module)
    hal.stream_synchronize(stream)
    got = struct.unpack(f"<{n}f", host_out.raw)
    wrong = [i for i in range(n) if got[i] != a[i] + b[i]]
    expect(not wrong, f"vector_add: {len(wrong)} wrong elements, first at {wrong[:1]}")
    got_ids = list(struct.unpack(f"<{programs}I", host_ids.raw))
    expect(got_ids == list(range(programs)), f"program_ids over grid {grid}: {got_ids}")
    for p in (da, db, dout, dids):
        hal.free(0, p)
    hal.stream_destroy(stream)
    return f"{fmt}, {len(image)} bytes"


@check("launch_kernel_errors")
def _launch_kernel_errors(hal: Hal):
    """Launches that do not fit fail with INVALID_VALUE and queue nothing: a zero grid or
    block dimension, too many threads, shared memory not allowed, NULL arguments, argument
    counts or sizes the kernel does not take (where the HAL knows them), and a stream of
    another device."""
    _needs_kernels(hal)
    fmt, image = _image(hal)
    target = hal.kernel_target(0)
    module = hal.module_load(0, fmt, image)
    ids = hal.module_function(module, "program_ids")
    dids = hal.malloc(0, 64)
    hal.memset(dids, 0xFF, 64)
    stream = hal.stream_create(0)
    arg = [ctypes.c_void_p(dids)]
    bad_shapes = [((0, 1, 1), (1, 1, 1)), ((1, 0, 1), (1, 1, 1)), ((1, 1, 1), (1, 1, 0)),
                  ((1, 1, 1), (target.max_threads_per_block + 1, 1, 1))]
    for grid, block in bad_shapes:
        expect_status(hal.raw_launch(ids, grid, block, 0, arg, stream), Status.INVALID_VALUE,
                      f"launch_kernel with grid {grid} and block {block}", hal)
    expect_status(hal.raw_launch(ids, (1, 1, 1), (1, 1, 1), target.max_shared_memory + 1, arg, stream),
                  Status.INVALID_VALUE, "launch_kernel with more shared memory than the device has", hal)
    expect_status(hal.raw("function_set_shared_memory", ids, target.max_shared_memory + 1),
                  Status.INVALID_VALUE, "function_set_shared_memory over the device's maximum", hal)
    one = (ctypes.c_uint32 * 3)(1, 1, 1)
    expect_status(hal.raw("launch_kernel", ids, one, one, 0, None, None, 1, stream), Status.INVALID_VALUE,
                  "launch_kernel with one argument and NULL args", hal)
    checked_args = hal.name == "sim"  # the sim's image declares its arguments
    if checked_args:
        expect_status(hal.raw_launch(ids, (1, 1, 1), (1, 1, 1), 0, [], stream), Status.INVALID_VALUE,
                      "launch_kernel with no arguments for one", hal)
        expect_status(hal.raw_launch(ids, (1, 1, 1), (1, 1, 1), 0, [ctypes.c_int32(0)], stream),
                      Status.INVALID_VALUE, "launch_kernel with a 4-byte argument for an 8-byte one", hal)
    if hal.device_count() > 1:
        other = hal.stream_create(1)
        expect_status(hal.raw_launch(ids, (1, 1, 1), (1, 1, 1), 0, arg, other), Status.INVALID_VALUE,
                      "launch_kernel of a device-0 kernel on a device-1 stream", hal)
        hal.stream_destroy(other)
    hal.stream_synchronize(stream)
    host = ctypes.create_string_buffer(64)
    hal.memcpy(ctypes.addressof(host), dids, 64, MemcpyKind.DEVICE_TO_HOST)
    expect(host.raw == b"\xff" * 64, "a refused launch ran")
    # a launch allowed more shared memory than the default runs
    big = min(target.max_shared_memory, 96 * 1024)
    hal.function_set_shared_memory(ids, big)
    hal.launch(ids, (2, 1, 1), (1, 1, 1), big, arg, stream)
    hal.stream_synchronize(stream)
    hal.memcpy(ctypes.addressof(host), dids, 8, MemcpyKind.DEVICE_TO_HOST)
    expect(struct.unpack("<2I", host.raw[:8]) == (0, 1), "a launch with shared memory did not run")
    hal.module_unload(module)
    hal.free(0, dids)
    hal.stream_destroy(stream)
    return "argument count and sizes checked" if checked_args else "argument count and sizes not checked here"
