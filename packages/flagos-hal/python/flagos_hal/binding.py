"""ctypes binding of the flagos HAL C ABI (include/flagos_hal/flagos_hal.h).

``load(name_or_path)`` opens a HAL library (RTLD_LOCAL, so several HALs, even two copies
of one, coexist in a process), checks its ABI and returns a :class:`Hal` whose methods
raise :class:`HalError` on failure. Pointers and stream/event handles are Python ints.
"""

from __future__ import annotations

import ctypes
import enum
import os
from dataclasses import dataclass

ABI_MAJOR = 1
ABI_MINOR = 1
ABI_VERSION = (ABI_MAJOR << 16) | ABI_MINOR
ENTRY_SYMBOL = "flagos_hal_get_table"

EVENT_DEFAULT = 0
EVENT_DISABLE_TIMING = 1
EVENT_BLOCKING_SYNC = 2


class Status(enum.IntEnum):
    SUCCESS = 0
    INVALID_VALUE = 1
    INVALID_DEVICE = 2
    OUT_OF_MEMORY = 3
    NOT_READY = 4
    INVALID_HANDLE = 5
    NOT_SUPPORTED = 6
    NO_DEVICE = 7
    DEVICE_FAULT = 8
    VERSION_MISMATCH = 9
    UNKNOWN = 999


class NativeDevice(enum.IntEnum):
    NONE = 0
    CPU = 1
    CUDA = 2


class MemcpyKind(enum.IntEnum):
    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3


class PointerType(enum.IntEnum):
    UNKNOWN = 0
    DEVICE = 1
    PINNED_HOST = 2


def _status_name(status: int) -> str:
    try:
        return Status(status).name
    except ValueError:
        return str(status)


class HalError(RuntimeError):
    """A failed HAL call: ``status`` (a :class:`Status` or int) and ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class HalAbiError(HalError):
    """The library is not a flagos HAL of this ABI major."""


class Dtype(enum.IntEnum):
    """Element types of graph inputs and outputs (flagos_dtype_t)."""
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    INT64 = 3
    INT32 = 4
    INT8 = 5
    UINT8 = 6
    BOOL = 7


GRAPH_MAX_DIMS = 8


class GraphTensorInfoStruct(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("name", ctypes.c_char * 64),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * GRAPH_MAX_DIMS),
        ("size_bytes", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class GraphTensorInfo:
    """One input or output of a loaded graph: a dense row-major tensor of a static shape."""
    name: str
    dtype: Dtype
    shape: tuple[int, ...]
    size_bytes: int


class KernelTargetStruct(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_char * 32),
        ("arch", ctypes.c_char * 64),
        ("warp_size", ctypes.c_int32),
        ("max_threads_per_block", ctypes.c_uint32),
        ("max_shared_memory", ctypes.c_uint64),
    ]


TENSOR_DESCRIPTOR_MAX_DIMS = 5


class TensorDescriptorInfoStruct(ctypes.Structure):
    """flagos_tensor_descriptor_info_t (ABI 1.5)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("ndim", ctypes.c_int32),
        ("base", ctypes.c_uint64),
        ("shape", ctypes.c_uint64 * TENSOR_DESCRIPTOR_MAX_DIMS),
        ("strides", ctypes.c_int64 * TENSOR_DESCRIPTOR_MAX_DIMS),
        ("block_shape", ctypes.c_uint32 * TENSOR_DESCRIPTOR_MAX_DIMS),
        ("element_size", ctypes.c_uint32),
        ("element_type", ctypes.c_int32),
        ("swizzle", ctypes.c_int32),
        ("fill_nan", ctypes.c_int32),
    ]


@dataclass(frozen=True)
class KernelTarget:
    """What a device is as a target of kernel compilers (flagos_kernel_target_t)."""

    backend: str  # the Triton backend that compiles for it; "" when none does
    arch: str
    warp_size: int
    max_threads_per_block: int
    max_shared_memory: int


class DeviceProperties(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("name", ctypes.c_char * 256),
        ("total_memory", ctypes.c_uint64),
        ("compute_units", ctypes.c_int32),
        ("native_device_index", ctypes.c_int32),
        ("major", ctypes.c_int32),
        ("minor", ctypes.c_int32),
    ]


class PointerAttributesStruct(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("device", ctypes.c_int32),
        ("base", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
    ]


@dataclass(frozen=True)
class PointerAttributes:
    type: PointerType
    device: int
    base: int  # 0 when unknown
    size: int


_int_p = ctypes.POINTER(ctypes.c_int)
_size_p = ctypes.POINTER(ctypes.c_size_t)
_vp = ctypes.c_void_p
_vpp = ctypes.POINTER(ctypes.c_void_p)
_cstr_p = ctypes.POINTER(ctypes.c_char_p)
_u, _i, _sz = ctypes.c_uint, ctypes.c_int, ctypes.c_size_t

# The table, in header order: (field, argument types). Every function returns a status.
# fn(data) and release(data) of stream_launch_host_task.
HOST_TASK_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

TABLE_FUNCTIONS: list[tuple[str, list]] = [
    ("get_name", [_cstr_p]),
    ("get_version", [_cstr_p]),
    ("get_error_string", [_i, _cstr_p]),
    ("get_last_error_message", [_cstr_p]),
    ("get_native_device", [_int_p]),
    ("get_device_count", [_int_p]),
    ("get_device", [_int_p]),
    ("set_device", [_i]),
    ("get_device_properties", [_i, ctypes.POINTER(DeviceProperties)]),
    ("device_synchronize", [_i]),
    ("mem_get_info", [_i, _size_p, _size_p]),
    ("malloc", [_i, _sz, _vpp]),
    ("free", [_i, _vp]),
    ("host_malloc", [_sz, _vpp]),
    ("host_free", [_vp]),
    ("memcpy", [_vp, _vp, _sz, _i]),
    ("memcpy_async", [_vp, _vp, _sz, _i, _vp]),
    ("memset", [_vp, _i, _sz]),
    ("memset_async", [_vp, _i, _sz, _vp]),
    ("pointer_get_attributes", [_vp, ctypes.POINTER(PointerAttributesStruct)]),
    ("stream_create", [_i, _i, _vpp]),
    ("stream_get_priority_range", [_int_p, _int_p]),
    ("stream_get_default", [_i, _vpp]),
    ("stream_destroy", [_vp]),
    ("stream_query", [_vp]),
    ("stream_synchronize", [_vp]),
    ("stream_wait_event", [_vp, _vp]),
    ("stream_get_device", [_vp, _int_p]),
    ("stream_get_native_handle", [_vp, _vpp]),
    ("event_create", [_u, _vpp]),
    ("event_destroy", [_vp]),
    ("event_record", [_vp, _vp]),
    ("event_query", [_vp]),
    ("event_synchronize", [_vp]),
    ("event_elapsed_time", [ctypes.POINTER(ctypes.c_float), _vp, _vp]),
    # ABI 1.1: the optional graph runtime.
    ("graph_get_formats", [_cstr_p]),
    ("graph_load", [_i, ctypes.c_char_p, _vp, _sz, _vpp]),
    ("graph_get_info", [_vp, _int_p, _int_p, _size_p]),
    ("graph_get_tensor_info", [_vp, _i, _i, ctypes.POINTER(GraphTensorInfoStruct)]),
    ("graph_execute", [_vp, _vpp, _i, _vpp, _i, _vp, _vp]),
    ("graph_destroy", [_vp]),
    # ABI 1.2: the optional kernel extension.
    ("kernel_get_formats", [_cstr_p]),
    ("kernel_get_target", [_i, ctypes.POINTER(KernelTargetStruct)]),
    ("module_load", [_i, ctypes.c_char_p, _vp, _sz, _vpp]),
    ("module_get_function", [_vp, ctypes.c_char_p, _vpp]),
    ("function_set_shared_memory", [_vp, _sz]),
    ("launch_kernel", [_vp, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32), _sz,
                       _vpp, _size_p, _i, _vp]),
    ("module_unload", [_vp]),
    # ABI 1.3: the optional stream capture.
    ("stream_begin_capture", [_vp]),
    ("stream_end_capture", [_vp, _vpp]),
    ("stream_is_capturing", [_vp, _int_p]),
    ("capture_instantiate", [_vp, _vpp]),
    ("capture_destroy", [_vp]),
    ("replay_launch", [_vp, _vp]),
    ("replay_destroy", [_vp]),
    # ABI 1.4: the optional host tasks.
    ("stream_launch_host_task", [_vp, HOST_TASK_FN, _vp, HOST_TASK_FN]),
    # ABI 1.5: the optional tensor descriptors.
    ("kernel_encode_tensor_descriptor", [_i, ctypes.POINTER(TensorDescriptorInfoStruct), _vp, _size_p]),
]

# The functions of the graph runtime (ABI 1.1): a HAL has all of them or none.
GRAPH_FUNCTIONS = [name for name, _ in TABLE_FUNCTIONS if name.startswith("graph_")]
# The functions of the kernel extension (ABI 1.2): a HAL has all of them or none.
KERNEL_FUNCTIONS = ["kernel_get_formats", "kernel_get_target", "module_load", "module_get_function",
                    "function_set_shared_memory", "launch_kernel", "module_unload"]
# The functions of the stream capture (ABI 1.3): a HAL has all of them or none.
CAPTURE_FUNCTIONS = ["stream_begin_capture", "stream_end_capture", "stream_is_capturing",
                     "capture_instantiate", "capture_destroy", "replay_launch", "replay_destroy"]
# The host tasks (ABI 1.4): one function.
HOST_TASK_FUNCTIONS = ["stream_launch_host_task"]
# The tensor descriptors (ABI 1.5): one function.
TENSOR_DESCRIPTOR_FUNCTIONS = ["kernel_encode_tensor_descriptor"]
OPTIONAL_FUNCTIONS = (GRAPH_FUNCTIONS + KERNEL_FUNCTIONS + CAPTURE_FUNCTIONS + HOST_TASK_FUNCTIONS
                      + TENSOR_DESCRIPTOR_FUNCTIONS)


class Table(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32)] + [
        (name, ctypes.CFUNCTYPE(ctypes.c_int, *args)) for name, args in TABLE_FUNCTIONS
    ]


# ABI 1.0 is complete up to event_elapsed_time; a smaller table is a broken vendor build.
MIN_TABLE_SIZE = Table.event_elapsed_time.offset + ctypes.sizeof(ctypes.c_void_p)
_GetTable = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.POINTER(Table)))


def version_string(v: int) -> str:
    return f"{v >> 16}.{v & 0xFFFF}"


class Hal:
    """One opened HAL library. Methods mirror the C table and raise HalError on failure."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        try:
            self._lib = ctypes.CDLL(self.path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            raise HalError(Status.UNKNOWN, f"flagos: cannot open HAL library '{self.path}': {e}") from e
        try:
            entry = _GetTable((ENTRY_SYMBOL, self._lib))
        except AttributeError as e:
            raise HalError(
                Status.UNKNOWN,
                f"flagos: '{self.path}' is not a flagos HAL: it does not export {ENTRY_SYMBOL}",
            ) from e
        out = ctypes.POINTER(Table)()
        status = entry(ABI_MAJOR, ctypes.byref(out))
        found = out.contents.abi_version if out else None
        if status == Status.VERSION_MISMATCH or (status == 0 and found is not None
                                                 and found >> 16 != ABI_MAJOR):
            what = version_string(found) if found is not None else f"a HAL refusing major {ABI_MAJOR}"
            raise HalAbiError(
                Status.VERSION_MISMATCH,
                f"flagos: HAL library '{self.path}' has an incompatible ABI: expected "
                f"{version_string(ABI_VERSION)} (major {ABI_MAJOR}), found {what}. Rebuild the HAL "
                "against this flagos-hal, or install a matching flagos-hal.",
            )
        if status != 0 or not out:
            raise HalError(status, f"flagos: HAL library '{self.path}' failed to hand out its "
                                   f"table: status {_status_name(status)}")
        if out.contents.struct_size < MIN_TABLE_SIZE:
            raise HalAbiError(
                Status.VERSION_MISMATCH,
                f"flagos: HAL library '{self.path}' has a truncated function table "
                f"({out.contents.struct_size} bytes, ABI 1.0 needs {MIN_TABLE_SIZE})",
            )
        self.table = out.contents
        self.abi_version = self.table.abi_version
        self.name = self._string("get_name")
        self.version = self._string("get_version")

    def __repr__(self) -> str:
        return f"<flagos_hal.Hal {self.name!r} from {self.path}>"

    # ---- plumbing ---------------------------------------------------------------
    def has(self, function: str) -> bool:
        """Whether the vendor's table contains `function` (FLAGOS_HAL_HAS)."""
        field = getattr(Table, function)
        return self.table.struct_size >= field.offset + field.size and bool(
            getattr(self.table, function))

    def raw(self, function: str, *args) -> int:
        """Call a table function with ctypes arguments and return its raw status."""
        if not self.has(function):
            return int(Status.NOT_SUPPORTED)
        return int(getattr(self.table, function)(*args))

    def error_string(self, status: int) -> str:
        text = ctypes.c_char_p()
        if self.raw("get_error_string", int(status), ctypes.byref(text)) != 0 or not text.value:
            return ""
        return text.value.decode(errors="replace")

    def last_error_message(self) -> str:
        text = ctypes.c_char_p()
        if self.raw("get_last_error_message", ctypes.byref(text)) != 0 or not text.value:
            return ""
        return text.value.decode(errors="replace")

    def call(self, function: str, *args) -> None:
        """Call a table function; raise HalError naming library and function on failure."""
        status = self.raw(function, *args)
        if status != 0:
            self._raise(function, status)

    def _raise(self, function: str, status: int):
        detail = self.last_error_message()
        text = self.error_string(status) or "unknown error"
        raise HalError(
            Status(status) if status in Status._value2member_map_ else status,
            f"{self.name or self.path} HAL ({self.path}): {function} failed with "
            f"{_status_name(status)} ({text})" + (f": {detail}" if detail else ""),
        )

    def _out(self, function: str, ctype, *args):
        value = ctype()
        self.call(function, *args, ctypes.byref(value))
        return value.value

    def _string(self, function: str) -> str:
        return (self._out(function, ctypes.c_char_p) or b"").decode(errors="replace")

    # ---- identity and devices ---------------------------------------------------
    def native_device(self) -> NativeDevice:
        return NativeDevice(self._out("get_native_device", ctypes.c_int))

    def device_count(self) -> int:
        return self._out("get_device_count", ctypes.c_int)

    def get_device(self) -> int:
        return self._out("get_device", ctypes.c_int)

    def set_device(self, device: int) -> None:
        self.call("set_device", device)

    def device_properties(self, device: int) -> DeviceProperties:
        props = DeviceProperties(struct_size=ctypes.sizeof(DeviceProperties))
        self.call("get_device_properties", device, ctypes.byref(props))
        return props

    def device_synchronize(self, device: int) -> None:
        self.call("device_synchronize", device)

    def mem_get_info(self, device: int) -> tuple[int, int]:
        """(free, total) bytes of `device`."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("mem_get_info", device, ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    # ---- memory -----------------------------------------------------------------
    def malloc(self, device: int, size: int) -> int:
        return self._out("malloc", ctypes.c_void_p, device, size) or 0

    def free(self, device: int, ptr: int) -> None:
        self.call("free", device, ptr)

    def host_malloc(self, size: int) -> int:
        return self._out("host_malloc", ctypes.c_void_p, size) or 0

    def host_free(self, ptr: int) -> None:
        self.call("host_free", ptr)

    def memcpy(self, dst: int, src: int, size: int, kind: MemcpyKind) -> None:
        self.call("memcpy", dst, src, size, int(kind))

    def memcpy_async(self, dst: int, src: int, size: int, kind: MemcpyKind, stream: int) -> None:
        self.call("memcpy_async", dst, src, size, int(kind), stream)

    def memset(self, ptr: int, value: int, size: int) -> None:
        self.call("memset", ptr, value, size)

    def memset_async(self, ptr: int, value: int, size: int, stream: int) -> None:
        self.call("memset_async", ptr, value, size, stream)

    def write(self, ptr: int, data: bytes) -> None:
        """Synchronous host-to-device copy of `data` to device pointer `ptr`."""
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self.memcpy(ptr, ctypes.addressof(buf), len(data), MemcpyKind.HOST_TO_DEVICE)

    def read(self, ptr: int, size: int) -> bytes:
        """Synchronous device-to-host copy of `size` bytes at device pointer `ptr`."""
        buf = ctypes.create_string_buffer(size)
        self.memcpy(ctypes.addressof(buf), ptr, size, MemcpyKind.DEVICE_TO_HOST)
        return buf.raw

    def pointer_attributes(self, ptr: int) -> PointerAttributes:
        a = PointerAttributesStruct()
        self.call("pointer_get_attributes", ptr, ctypes.byref(a))
        return PointerAttributes(PointerType(a.type), a.device, a.base or 0, a.size)

    # ---- streams ----------------------------------------------------------------
    def stream_create(self, device: int, priority: int = 0) -> int:
        return self._out("stream_create", ctypes.c_void_p, device, priority)

    def stream_priority_range(self) -> tuple[int, int]:
        """(least, greatest) priorities; greatest is the most urgent (most negative)."""
        least, greatest = ctypes.c_int(), ctypes.c_int()
        self.call("stream_get_priority_range", ctypes.byref(least), ctypes.byref(greatest))
        return least.value, greatest.value

    def default_stream(self, device: int) -> int:
        return self._out("stream_get_default", ctypes.c_void_p, device)

    def stream_destroy(self, stream: int) -> None:
        self.call("stream_destroy", stream)

    def stream_query(self, stream: int) -> bool:
        """True when all queued work is done."""
        return self._ready("stream_query", stream)

    def stream_synchronize(self, stream: int) -> None:
        self.call("stream_synchronize", stream)

    def stream_wait_event(self, stream: int, event: int) -> None:
        self.call("stream_wait_event", stream, event)

    def stream_device(self, stream: int) -> int:
        return self._out("stream_get_device", ctypes.c_int, stream)

    def stream_native_handle(self, stream: int) -> int:
        return self._out("stream_get_native_handle", ctypes.c_void_p, stream) or 0

    # ---- events -----------------------------------------------------------------
    def event_create(self, flags: int = EVENT_DEFAULT) -> int:
        return self._out("event_create", ctypes.c_void_p, flags)

    def event_destroy(self, event: int) -> None:
        self.call("event_destroy", event)

    def event_record(self, event: int, stream: int) -> None:
        self.call("event_record", event, stream)

    def event_query(self, event: int) -> bool:
        """True when the captured work has completed."""
        return self._ready("event_query", event)

    def event_synchronize(self, event: int) -> None:
        self.call("event_synchronize", event)

    def elapsed_time(self, start: int, end: int) -> float:
        """Milliseconds between two completed timing events."""
        ms = ctypes.c_float()
        self.call("event_elapsed_time", ctypes.byref(ms), start, end)
        return ms.value

    # ---- graph runtime (ABI 1.1, optional) -------------------------------------------
    def has_graph_runtime(self) -> bool:
        """Whether the table has the whole graph runtime (every graph_* function)."""
        return all(self.has(f) for f in GRAPH_FUNCTIONS)

    def graph_formats(self) -> list[str]:
        """The artifact formats graph_load accepts ([] for a HAL without a graph runtime)."""
        if not self.has_graph_runtime():
            return []
        return [f for f in self._string("graph_get_formats").split(",") if f]

    def graph_load(self, device: int, fmt: str, artifact: bytes) -> int:
        """Load a compiled artifact of format `fmt` onto `device`; returns the graph handle."""
        buf = ctypes.create_string_buffer(bytes(artifact), len(artifact))
        return self._out("graph_load", ctypes.c_void_p, device, fmt.encode(), ctypes.addressof(buf),
                         len(artifact))

    def graph_info(self, graph: int) -> tuple[int, int, int]:
        """(number of inputs, number of outputs, workspace bytes) of a loaded graph."""
        n_in, n_out, ws = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
        self.call("graph_get_info", graph, ctypes.byref(n_in), ctypes.byref(n_out), ctypes.byref(ws))
        return n_in.value, n_out.value, ws.value

    def graph_tensor_info(self, graph: int, is_output: bool, index: int) -> GraphTensorInfo:
        t = GraphTensorInfoStruct(struct_size=ctypes.sizeof(GraphTensorInfoStruct))
        self.call("graph_get_tensor_info", graph, int(is_output), index, ctypes.byref(t))
        return GraphTensorInfo(t.name.decode(errors="replace"), Dtype(t.dtype),
                               tuple(t.shape[: t.ndim]), t.size_bytes)

    def graph_execute(self, graph: int, inputs: list[int], outputs: list[int], workspace: int,
                      stream: int) -> None:
        """Queue one execution on `stream`: device pointers of the inputs and outputs."""
        ins = (ctypes.c_void_p * max(len(inputs), 1))(*inputs)
        outs = (ctypes.c_void_p * max(len(outputs), 1))(*outputs)
        self.call("graph_execute", graph, ins, len(inputs), outs, len(outputs), workspace or None,
                  stream)

    def graph_destroy(self, graph: int) -> None:
        self.call("graph_destroy", graph)

    # ---- kernel extension (ABI 1.2, optional) ----------------------------------------
    def has_kernels(self) -> bool:
        """Whether the table has the whole kernel extension (every kernel function)."""
        return all(self.has(f) for f in KERNEL_FUNCTIONS)

    def kernel_formats(self) -> list[str]:
        """The image formats module_load accepts ([] for a HAL without the extension)."""
        if not self.has_kernels():
            return []
        return [f for f in self._string("kernel_get_formats").split(",") if f]

    def kernel_target(self, device: int) -> KernelTarget:
        t = KernelTargetStruct(struct_size=ctypes.sizeof(KernelTargetStruct))
        self.call("kernel_get_target", device, ctypes.byref(t))
        return KernelTarget(t.backend.decode(), t.arch.decode(), t.warp_size,
                            t.max_threads_per_block, t.max_shared_memory)

    def module_load(self, device: int, fmt: str, image: bytes) -> int:
        """Load a device binary image of format `fmt` onto `device`; the module handle."""
        buf = ctypes.create_string_buffer(bytes(image), len(image))
        return self._out("module_load", ctypes.c_void_p, device, fmt.encode(), ctypes.addressof(buf),
                         len(image))

    def module_function(self, module: int, name: str) -> int:
        return self._out("module_get_function", ctypes.c_void_p, module, name.encode())

    def function_set_shared_memory(self, function: int, size: int) -> None:
        self.call("function_set_shared_memory", function, size)

    def launch_args(self, values: list) -> tuple:
        """ctypes values (c_void_p, c_int64, ...) as launch_kernel takes them: (args,
        arg_sizes, count); keep the tuple alive until the call returns."""
        args = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        sizes = (ctypes.c_size_t * max(len(values), 1))(*[ctypes.sizeof(v) for v in values])
        return args, sizes, len(values)

    def raw_launch(self, function: int, grid: tuple, block: tuple, shared: int, values: list,
                   stream: int) -> int:
        """launch_kernel's status (no raise)."""
        args, sizes, n = self.launch_args(values)
        return self.raw("launch_kernel", function, (ctypes.c_uint32 * 3)(*grid),
                        (ctypes.c_uint32 * 3)(*block), shared, args, sizes, n, stream)

    def launch(self, function: int, grid: tuple, block: tuple, shared: int, values: list,
               stream: int) -> None:
        """Queue a launch of `function` on `stream`; `values` are ctypes argument values."""
        status = self.raw_launch(function, grid, block, shared, values, stream)
        if status != 0:
            self._raise("launch_kernel", status)

    def module_unload(self, module: int) -> None:
        self.call("module_unload", module)

    # ---- tensor descriptors (ABI 1.5, optional) ---------------------------------------
    @staticmethod
    def tensor_descriptor_info(base: int, shape: list[int], strides: list[int], block: list[int],
                               element_size: int, element_type: int = 0, swizzle: int = 0,
                               fill_nan: bool = False) -> TensorDescriptorInfoStruct:
        """A flagos_tensor_descriptor_info_t (dimensions outermost first, strides in elements)."""
        info = TensorDescriptorInfoStruct(struct_size=ctypes.sizeof(TensorDescriptorInfoStruct),
                                          ndim=len(shape), base=base, element_size=element_size,
                                          element_type=element_type, swizzle=swizzle,
                                          fill_nan=int(fill_nan))
        for i, (n, st, b) in enumerate(zip(shape, strides, block)):
            info.shape[i], info.strides[i], info.block_shape[i] = n, st, b
        return info

    def raw_encode_tensor_descriptor(self, device: int, info: TensorDescriptorInfoStruct,
                                     capacity: int = 256) -> tuple[int, bytes, int]:
        """kernel_encode_tensor_descriptor's (status, descriptor bytes, size out) (no raise)."""
        buf = ctypes.create_string_buffer(max(capacity, 1))
        size = ctypes.c_size_t(capacity)
        status = self.raw("kernel_encode_tensor_descriptor", device, ctypes.byref(info),
                          ctypes.addressof(buf) if capacity else None, ctypes.byref(size))
        return status, buf.raw[:size.value] if status == 0 else b"", size.value

    def encode_tensor_descriptor(self, device: int, info: TensorDescriptorInfoStruct) -> bytes:
        """The descriptor's bytes, as a launch passes them by value."""
        status, data, _ = self.raw_encode_tensor_descriptor(device, info)
        if status != 0:
            self._raise("kernel_encode_tensor_descriptor", status)
        return data

    # ---- stream capture (ABI 1.3, optional) -------------------------------------------
    def has_capture(self) -> bool:
        """Whether the table has the whole stream capture (every capture function)."""
        return all(self.has(f) for f in CAPTURE_FUNCTIONS)

    def begin_capture(self, stream: int) -> None:
        self.call("stream_begin_capture", stream)

    def end_capture(self, stream: int) -> int:
        """Stop recording on `stream`: the capture's handle."""
        out = ctypes.c_void_p()
        self.call("stream_end_capture", stream, ctypes.byref(out))
        return out.value or 0

    def is_capturing(self, stream: int) -> bool:
        out = ctypes.c_int(-1)
        self.call("stream_is_capturing", stream, ctypes.byref(out))
        return bool(out.value)

    def instantiate(self, capture: int) -> int:
        """A replay of `capture`."""
        out = ctypes.c_void_p()
        self.call("capture_instantiate", capture, ctypes.byref(out))
        return out.value or 0

    def capture_destroy(self, capture: int) -> None:
        self.call("capture_destroy", capture)

    def replay(self, replay: int, stream: int) -> None:
        """Queue one run of the recorded work on `stream`."""
        self.call("replay_launch", replay, stream)

    def replay_destroy(self, replay: int) -> None:
        self.call("replay_destroy", replay)

    def _ready(self, function: str, handle: int) -> bool:
        status = self.raw(function, handle)
        if status == Status.NOT_READY:
            return False
        if status != 0:
            self._raise(function, status)
        return True


def load(name_or_path: str) -> Hal:
    """Open a HAL by entry-point name (``"sim"``) or library path, with the ABI checked."""
    from flagos_hal.discovery import resolve

    return Hal(resolve(name_or_path).path)
