"""Conformance checks of the optional graph runtime (ABI 1.1, the graph_* functions).

They skip on a HAL without one. The checks that execute a graph need an artifact: they
build a small ONNX model (with the ``onnx`` package) and compile it with the HAL's graph
compiler (entry point ``flagos.graph_compiler`` named after the HAL); without either they
skip, saying which is missing.
"""

from __future__ import annotations

import ctypes
import struct

from flagos_hal.binding import Dtype, Hal, HalError, MemcpyKind, Status
from flagos_hal.checks import Skip, check, expect, expect_load_refusals, expect_status

_IN, _HID, _BATCH = 5, 3, 4


def _needs_graph_runtime(hal: Hal) -> None:
    if not hal.has_graph_runtime():
        raise Skip("the HAL has no graph runtime (optional, ABI 1.1)")


def _floats(values) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def _unfloats(data: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def _reference(x: list[float], w: list[float], b: list[float]) -> list[float]:
    """relu(x @ w + b) * 2, x [BATCH, IN], w [IN, HID], b [HID]: what the model computes."""
    out = []
    for i in range(_BATCH):
        for j in range(_HID):
            acc = sum(x[i * _IN + k] * w[k * _HID + j] for k in range(_IN)) + b[j]
            out.append(max(acc, 0.0) * 2.0)
    return out


def _artifact(hal: Hal) -> tuple[bytes, str, list[float], list[float]]:
    """A compiled relu(x @ w + b) * 2 for this HAL: (artifact, format, w, b)."""
    from flagos_hal.graph_compiler import CompileError, find
    compiler = find(hal.name)
    if compiler is None:
        raise Skip(f"no graph compiler registered for HAL '{hal.name}' (entry point group "
                   "flagos.graph_compiler)")
    try:
        from onnx import TensorProto, helper
    except ImportError:
        raise Skip("the onnx package is not installed (pip install 'flagos-hal[graph]')") from None
    fmt = next((f for f in compiler.formats if f in hal.graph_formats()), None)
    if fmt is None:
        raise AssertionError(f"the compiler writes {compiler.formats}, the HAL loads "
                             f"{hal.graph_formats()}")
    w = [((i * 7) % 11 - 5) / 4.0 for i in range(_IN * _HID)]
    b = [0.25 * (j - 1) for j in range(_HID)]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"]),
         helper.make_node("Relu", ["y"], ["r"]), helper.make_node("Mul", ["r", "two"], ["out"])],
        "conformance",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [_BATCH, _IN])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [_BATCH, _HID])],
        [helper.make_tensor("w", TensorProto.FLOAT, [_IN, _HID], w),
         helper.make_tensor("b", TensorProto.FLOAT, [_HID], b),
         helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    try:
        return compiler.compile(model.SerializeToString(), fmt), fmt, w, b
    except CompileError as e:
        raise AssertionError(f"{compiler.name} failed on a MatMul/Add/Relu/Mul model: {e}") from e


@check("graph_formats", devices=0)
def _graph_formats(hal: Hal):
    """graph_get_formats lists at least one format; a NULL out-pointer is INVALID_VALUE."""
    _needs_graph_runtime(hal)
    formats = hal.graph_formats()
    expect(formats and all(f and " " not in f for f in formats), f"formats {formats!r}")
    expect_status(hal.raw("graph_get_formats", None), Status.INVALID_VALUE, "NULL formats", hal)
    return ", ".join(formats)


@check("graph_load_errors")
def _graph_load_errors(hal: Hal):
    """Unknown formats, malformed artifacts, bad devices and unknown handles fail cleanly."""
    _needs_graph_runtime(hal)
    fmt = hal.graph_formats()[0]
    expect_load_refusals(hal, "graph_load", fmt, "artifact", short=3)
    buf = ctypes.create_string_buffer(64)
    bogus = ctypes.addressof(buf)
    n = ctypes.c_int()
    ws = ctypes.c_size_t()
    expect_status(hal.raw("graph_get_info", bogus, ctypes.byref(n), ctypes.byref(n), ctypes.byref(ws)),
                  Status.INVALID_HANDLE, "graph_get_info of an unknown graph", hal)
    expect_status(hal.raw("graph_destroy", bogus), Status.INVALID_HANDLE, "graph_destroy of an unknown graph",
                  hal)


@check("graph_execute")
def _graph_execute(hal: Hal):
    """A compiled graph describes its inputs and outputs and runs stream-ordered: inputs
    copied on the stream before it, outputs read after it, destroy with work pending."""
    _needs_graph_runtime(hal)
    artifact, fmt, w, b = _artifact(hal)
    g = hal.graph_load(0, fmt, artifact)
    n_in, n_out, ws_size = hal.graph_info(g)
    expect((n_in, n_out) == (1, 1), f"{n_in} inputs and {n_out} outputs, expected 1 and 1")
    i0, o0 = hal.graph_tensor_info(g, False, 0), hal.graph_tensor_info(g, True, 0)
    expect(i0.shape == (_BATCH, _IN) and i0.dtype == Dtype.FLOAT32 and i0.size_bytes == _BATCH * _IN * 4,
           f"input described as {i0}")
    expect(o0.shape == (_BATCH, _HID) and o0.dtype == Dtype.FLOAT32, f"output described as {o0}")
    try:
        hal.graph_tensor_info(g, True, 1)
        raise AssertionError("graph_tensor_info of output 1 of 1 succeeded")
    except HalError as e:
        expect(e.status == Status.INVALID_VALUE, f"output index out of range: {e}")
    x = [((i * 5) % 9 - 4) / 3.0 for i in range(_BATCH * _IN)]
    stream = hal.stream_create(0)
    dx, dy = hal.malloc(0, i0.size_bytes), hal.malloc(0, o0.size_bytes)
    ws = hal.malloc(0, ws_size) if ws_size else 0
    host_in = ctypes.create_string_buffer(_floats(x), i0.size_bytes)
    host_out = ctypes.create_string_buffer(o0.size_bytes)
    hal.memset(dy, 0xEE, o0.size_bytes)
    bad = (ctypes.c_void_p * 2)(dx, dx)
    outs = (ctypes.c_void_p * 1)(dy)
    expect_status(hal.raw("graph_execute", g, bad, 2, outs, 1, ws or None, stream), Status.INVALID_VALUE,
                  "graph_execute with 2 inputs for 1", hal)
    # All stream-ordered: the copy in, the execution, the copy out; destroy before the end.
    hal.memcpy_async(dx, ctypes.addressof(host_in), i0.size_bytes, MemcpyKind.HOST_TO_DEVICE, stream)
    hal.graph_execute(g, [dx], [dy], ws, stream)
    hal.memcpy_async(ctypes.addressof(host_out), dy, o0.size_bytes, MemcpyKind.DEVICE_TO_HOST, stream)
    hal.graph_destroy(g)
    hal.stream_synchronize(stream)
    got, want = _unfloats(host_out.raw), _reference(x, w, b)
    worst = max(abs(p - q) for p, q in zip(got, want))
    expect(worst < 1e-4, f"results differ from the reference by {worst}")
    for p in (dx, dy, ws):
        if p:
            hal.free(0, p)
    hal.stream_destroy(stream)
    return f"{fmt}, {len(artifact)} bytes, workspace {ws_size}"
