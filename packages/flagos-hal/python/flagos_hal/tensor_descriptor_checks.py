"""Conformance checks of the optional tensor descriptors (ABI 1.5:
kernel_encode_tensor_descriptor): descriptions the ABI rules out are refused with
INVALID_VALUE, a capacity too small says the size needed, and (where the suite has a
kernel that reads one: the simulator's ``tile_load``) a launch given the descriptor by
value reads the tensor through it, out-of-bounds elements filled as asked. A HAL without
the function skips them."""

from __future__ import annotations

import ctypes
import math
import struct

from flagos_hal.binding import Hal, MemcpyKind, Status
from flagos_hal.checks import Skip, check, expect, expect_status

# The element type and swizzle codes a valid description uses on each HAL: CUDA's
# CU_TENSOR_MAP_DATA_TYPE_FLOAT32 (7) and no swizzle; the sim takes no codes (0).
_CODES = {"cuda": (7, 0)}


def _needs_descriptors(hal: Hal) -> None:
    if not hal.has("kernel_encode_tensor_descriptor"):
        raise Skip("the HAL has no tensor descriptors (optional, ABI 1.5)")


def _info(hal: Hal, base: int, shape, strides, block, **kw):
    etype, swizzle = _CODES.get(hal.name, (0, 0))
    kw.setdefault("element_type", etype)
    kw.setdefault("swizzle", swizzle)
    return hal.tensor_descriptor_info(base, list(shape), list(strides), list(block), kw.pop("element_size", 4),
                                      **kw)


@check("tensor_descriptor_errors")
def _tensor_descriptor_errors(hal: Hal):
    """Refused with INVALID_VALUE: no or too many dimensions, a NULL base, a zero size or
    tile, an innermost stride other than 1, an element size of 3, memory of no device, a
    NULL size; a capacity too small returns the size needed."""
    _needs_descriptors(hal)
    rows, cols = 64, 32
    p = hal.malloc(0, rows * cols * 4)
    try:
        ok = _info(hal, p, (rows, cols), (cols, 1), (16, 16))
        status, data, size = hal.raw_encode_tensor_descriptor(0, ok)
        expect_status(status, Status.SUCCESS, "kernel_encode_tensor_descriptor of a 64x32 float32 tensor", hal)
        expect(size == len(data) and size > 0, f"a descriptor of {size} bytes")
        status, _, needed = hal.raw_encode_tensor_descriptor(0, ok, capacity=size - 1)
        expect_status(status, Status.INVALID_VALUE, f"a capacity of {size - 1} bytes", hal)
        expect(needed == size, f"a capacity too small said {needed} bytes are needed, not {size}")
        bad = {
            "no dimensions": _info(hal, p, (), (), ()),
            "six dimensions": _info(hal, p, (1,) * 5, (1,) * 5, (1,) * 5),
            "a NULL base": _info(hal, 0, (rows, cols), (cols, 1), (16, 16)),
            "a zero size": _info(hal, p, (0, cols), (cols, 1), (16, 16)),
            "a zero tile": _info(hal, p, (rows, cols), (cols, 1), (16, 0)),
            "an innermost stride of 2": _info(hal, p, (rows, cols // 2), (cols, 2), (16, 16)),
            "an element size of 3": _info(hal, p, (rows, cols), (cols, 1), (16, 16), element_size=3),
        }
        if hal.name == "sim":  # the sim knows its allocations; a driver may not check them
            host = ctypes.create_string_buffer(rows * cols * 4)
            bad["host memory"] = _info(hal, ctypes.addressof(host), (rows, cols), (cols, 1), (16, 16))
            bad["a tensor past its allocation"] = _info(hal, p, (rows + 1, cols), (cols, 1), (16, 16))
        for what, info in bad.items():
            if what == "six dimensions":
                info.ndim = 6
            status, _, _ = hal.raw_encode_tensor_descriptor(0, info)
            expect_status(status, Status.INVALID_VALUE, f"kernel_encode_tensor_descriptor of {what}", hal)
        size_out = ctypes.create_string_buffer(256)
        status = hal.raw("kernel_encode_tensor_descriptor", 0, ctypes.byref(ok), ctypes.addressof(size_out), None)
        expect_status(status, Status.INVALID_VALUE, "kernel_encode_tensor_descriptor with a NULL size", hal)
        status, _, _ = hal.raw_encode_tensor_descriptor(hal.device_count(), ok)
        expect_status(status, Status.INVALID_DEVICE, "kernel_encode_tensor_descriptor on a device past the last",
                      hal)
    finally:
        hal.free(0, p)
    return f"{size}-byte descriptors"


@check("tensor_descriptor_launch")
def _tensor_descriptor_launch(hal: Hal):
    """A kernel given a descriptor by value reads the tensor through it: a tile inside the
    tensor, and one across its edge with the elements outside read as zero or NaN."""
    _needs_descriptors(hal)
    if not hal.has_kernels():
        raise Skip("the HAL has no kernel extension (optional, ABI 1.2)")
    # imported here: kernel_checks imports checks, which imports this module
    from flagos_hal.kernel_checks import SIM_FORMAT, _image

    fmt, image = _image(hal)
    if fmt != SIM_FORMAT:
        raise Skip(f"the suite has no kernel reading a descriptor in {fmt}; a Triton kernel with a "
                   "host tensor descriptor tests it (flagos-core's tests)")
    rows, cols, ld = 20, 12, 16  # a 20x12 view of a 20x16 tensor
    values = [float(r * 100 + c) for r in range(rows) for c in range(ld)]
    p = hal.malloc(0, len(values) * 4)
    tile = (8, 8)
    out = hal.malloc(0, tile[0] * tile[1] * 4)
    module = hal.module_load(0, fmt, image)
    stream = hal.stream_create(0)
    try:
        fn = hal.module_function(module, "tile_load")
        host = ctypes.create_string_buffer(struct.pack(f"<{len(values)}f", *values), len(values) * 4)
        hal.memcpy(p, ctypes.addressof(host), len(values) * 4, MemcpyKind.HOST_TO_DEVICE)
        got_tiles = []
        for at, nan in (((4, 2), False), ((16, 8), False), ((16, 8), True)):
            desc = hal.encode_tensor_descriptor(0, _info(hal, p, (rows, cols), (ld, 1), tile, fill_nan=nan))
            value = ctypes.create_string_buffer(desc, len(desc))
            hal.launch(fn, (1, 1, 1), (1, 1, 1), 0,
                       [value, ctypes.c_void_p(out), ctypes.c_int64(at[0]), ctypes.c_int64(at[1])], stream)
            hal.stream_synchronize(stream)
            back = ctypes.create_string_buffer(tile[0] * tile[1] * 4)
            hal.memcpy(ctypes.addressof(back), out, len(back), MemcpyKind.DEVICE_TO_HOST)
            got = struct.unpack(f"<{tile[0] * tile[1]}f", back.raw)
            for i in range(tile[0]):
                for j in range(tile[1]):
                    r, c = at[0] + i, at[1] + j
                    want = values[r * ld + c] if r < rows and c < cols else math.nan if nan else 0.0
                    g = got[i * tile[1] + j]
                    expect(g == want or (math.isnan(g) and math.isnan(want)),
                           f"tile at {at} (fill {'NaN' if nan else 'zero'}): element ({i}, {j}) is {g}, want {want}")
            got_tiles.append(at)
    finally:
        hal.stream_destroy(stream)
        hal.module_unload(module)
        hal.free(0, p)
        hal.free(0, out)
    return f"{len(got_tiles)} tiles read through descriptors"
