"""The launch cache: ops whose Python kernel is a few launches of compiled kernels,
relaunched from C++ on repeated calls.

A Triton kernel's Python wrapper costs tens of microseconds of host time per call (its
checks, the binding of each argument, the launch through Python), more than the GPU time
of a small kernel: a decode step at batch 1 is bound by it. :func:`register` puts a C++
kernel in the op's place for one device type. It keys each call by its arguments'
metadata (each tensor's dtype, device, sizes, strides and 16-byte alignment, every other
argument's value); the first call of a key runs the Python kernel, which records the
launches it makes (:func:`record_triton` or :func:`record`; through the HAL,
:mod:`flagos.kernels` records them itself); later calls of the key allocate the results
as recorded and launch the kernels in order from C++ on the current stream, with no
Python.

Registering an op states that its Python kernel's launches (grids, constants, which
argument each pointer is) and its results' shapes depend on its arguments' metadata only,
and that the launches are the kernel's whole device work; the code that launches records
only calls where that holds, and a recorded call that runs an ATen op that computes (a
fill, a copy, arithmetic: work a relaunch would not do) is not kept. Launches are kept only where every pointer they pass is the data pointer of
exactly one argument or result, or, for launches through the HAL, points into exactly one
block of flagos memory the kernel allocated that is not a result (a temporary, allocated
again at each relaunch), and the results are fresh tensors; at most 16 launches a call.

Kept launches do not call Triton's launch hooks (``triton.knobs.runtime``); records are
not made while hooks are set, and :func:`clear` (or ``FLAGOS_LAUNCH_CACHE=0`` in the
environment, or :func:`disabled`) makes every call go through Python again.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator, Sequence

from flagos import _C

__all__ = ["clear", "disabled", "pack_params", "param_kinds", "record", "record_triton", "recording", "register",
           "stats", "triton_hook_set", "watched"]

# Triton's scalar parameter types (the compiled kernel's signature) as C sizes
_INT_BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u1": 1, "u8": 1, "u16": 2,
              "u32": 4, "u64": 8}
_FLOAT_FORMATS = {"fp16": ("<e", "<H", 2), "fp32": ("<f", "<I", 4), "f32": ("<f", "<I", 4),
                  "fp64": ("<d", "<Q", 8)}
# Each mirrored type's parameter kind for flagos._C._TypedLauncher (typed_launch.cpp)
_KINDS = {**{ty: str(n) for ty, n in _INT_BYTES.items()}, "fp16": "h", "bf16": "b", "fp32": "f",
          "f32": "f", "fp64": "d", "constexpr": "c"}
# The Triton releases whose CUDA launcher passes, after the kernel's own parameters, the
# global and the profile scratch pointers (triton/backends/nvidia/driver.py)
_TRITON_SCRATCH_PARAMS = {(3, 5): 2, (3, 6): 2}


_DISPATCH_KEYS = {"flagos": "PrivateUse1", "cuda": "CUDA", "cpu": "CPU"}


def register(op: str, device_type: str, kernel: Callable) -> None:
    """Put the launch-cached kernel in place of ``op`` ("ns::name[.overload]", defined
    already) for ``device_type``, ``kernel`` the op's Python kernel (called as a
    ``torch.library`` kernel): "flagos", where the kernel runs on flagos tensors and
    launches through the HAL (:mod:`flagos.kernels`, recorded by themselves); "cuda" or
    "cpu", a twin device's, where it launches through the twin's API (:func:`record`)."""
    key = _DISPATCH_KEYS.get(device_type)
    if key is None:
        raise ValueError(f"flagos launch cache: device type {device_type!r} is not one of "
                         f"{', '.join(_DISPATCH_KEYS)}")
    _C._launch_cache_register(op, key, watched(kernel))


# ATen ops that do no device work: allocating without initializing, and metadata. Views
# are recognized by their schema (OpOverload.is_view).
_NO_DEVICE_WORK = frozenset({
    "aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided", "aten::sym_size.int", "aten::sym_stride.int", "aten::sym_numel",
    "aten::sym_storage_offset", "aten::is_contiguous", "aten::is_same_size",
})


def watched(kernel: Callable) -> Callable:
    """``kernel``, whose recorded calls are watched for device work other than their
    launches: an ATen op that computes (a copy, a fill, arithmetic) spoils the recording,
    since a relaunch would not do that work (a temporary or result it initialized would be
    left as allocated). Calls not recorded run as they are."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class DeviceWorkWatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view and func.name() not in _NO_DEVICE_WORK:
                _C._launch_cache_spoil_recording()
            return func(*args, **(kwargs or {}))

    def run(*args, **kwargs):
        if not _C._launch_cache_recording():
            return kernel(*args, **kwargs)
        with DeviceWorkWatch():
            return kernel(*args, **kwargs)

    return run


def recording() -> bool:
    """Whether a launch-cached op's Python kernel is running on this thread (a launch made
    now can be recorded)."""
    return _C._launch_cache_recording()


def record(function: int, grid: Sequence[int], block_threads: int, shared_bytes: int,
           params: Sequence[tuple[bool, int, int]], keepalive: object = None) -> bool:
    """Record a launch the running Python kernel makes (one call per launch, in order):
    ``function`` (a ``CUfunction``;
    on "cpu" a ``void(const uint32_t grid[3], void** params)`` host function), the grid,
    the threads of a block, the dynamic shared memory, and each parameter as
    ``(is_pointer, bytes, bits)``. ``keepalive`` is held while the launch is kept (what
    owns ``function``). False when nothing is recording."""
    return _C._launch_cache_record(int(function), [int(g) for g in grid], int(block_threads),
                                   int(shared_bytes), list(params), keepalive)


def _triton_version() -> tuple[int, int]:
    import triton

    return tuple(int(x) for x in triton.__version__.split(".")[:2])


def record_triton(compiled: object, grid: Sequence[int], args: Sequence[object]) -> bool:
    """Record a launch of Triton's ``compiled`` kernel (what ``kernel[grid](...)`` returns)
    with ``args``, every argument of the kernel in its signature's order as they were
    passed. False, with nothing recorded, where the launch needs what a kept launch does
    not do (clusters, cooperative or dependent launches, scratch memory, Triton launch
    hooks), a parameter is of a type not mirrored, or this Triton's launcher is not
    mirrored."""
    if not recording():
        return False
    scratch = _TRITON_SCRATCH_PARAMS.get(_triton_version())
    md = getattr(compiled, "metadata", None)
    src = getattr(compiled, "src", None)
    signature = getattr(src, "signature", None)
    if scratch is None or md is None or not isinstance(signature, dict) \
            or len(signature) != len(args):
        return False
    if getattr(md, "num_ctas", 1) != 1 or getattr(md, "launch_cooperative_grid", False) \
            or getattr(md, "launch_pdl", False) or getattr(md, "global_scratch_size", 0) \
            or getattr(md, "profile_scratch_size", 0) or _triton_hooked():
        return False
    try:
        params = pack_params(signature.values(), args)
    except (TypeError, ValueError, OverflowError, struct.error):  # not mirrored: not kept
        return False
    if params is None:
        return False
    params += [(False, 8, 0)] * scratch
    g = [int(x) for x in grid] + [1] * (3 - len(grid))
    return record(compiled.function, g, 32 * md.num_warps, md.shared, params, compiled)


def pack_params(types: Sequence[object], args: Sequence[object]
                ) -> list[tuple[bool, int, int] | bytes] | None:
    """A launch's parameters as ``(is_pointer, bytes, bits)``, from Triton's type names
    (``*fp32`` a pointer: a tensor, an address or None; ``i32``, ``fp32``, ...; a
    ``constexpr`` is not passed) and the values, as Triton's CUDA launcher passes them, or
    as the value's bytes for ``bytes`` (a tensor descriptor the HAL encoded, passed by
    value); None for a type not mirrored. Raises for a value its type cannot hold."""
    params: list[tuple[bool, int, int] | bytes] = []
    for ty, value in zip(types, args):
        if not isinstance(ty, str):  # tuples, tensor descriptors
            return None
        if ty == "constexpr":
            continue
        if ty == "bytes":
            params.append(bytes(value))
        elif ty.startswith("*"):
            ptr = 0 if value is None else value if isinstance(value, int) else value.data_ptr()
            params.append((True, 8, ptr))
        elif ty in _INT_BYTES:
            n = _INT_BYTES[ty]
            params.append((False, n, int(value) & ((1 << 8 * n) - 1)))
        elif ty in _FLOAT_FORMATS:
            f, i, n = _FLOAT_FORMATS[ty]
            params.append((False, n, struct.unpack(i, struct.pack(f, float(value)))[0]))
        elif ty == "bf16":  # the upper half of the fp32 bits, rounded to nearest even
            bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
            params.append((False, 2, ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF))
        else:
            return None
    return params


def param_kinds(types: Sequence[object]) -> str | None:
    """The parameter kinds of a kernel of Triton's ``types`` (its signature's values) as
    ``flagos._C._TypedLauncher`` takes them: one character per type, ``p`` a pointer,
    ``1`` ``2`` ``4`` ``8`` an integer of that many bytes, ``h`` ``b`` ``f`` ``d`` fp16,
    bf16, fp32, fp64, ``c`` a constexpr; None where a type is not mirrored (tuples, tensor
    descriptors)."""
    kinds = []
    for ty in types:
        if not isinstance(ty, str):
            return None
        kind = "p" if ty.startswith("*") else _KINDS.get(ty)
        if kind is None:
            return None
        kinds.append(kind)
    return "".join(kinds)


def triton_hook_set(hook: object) -> bool:
    """Whether a Triton launch hook (``triton.knobs.runtime.launch_enter_hook`` or
    ``launch_exit_hook``) is set: a callable, or (Triton 3.6) a non-empty HookChain (an
    empty chain is what Triton has when nothing is registered)."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return bool(calls) if isinstance(calls, list) else True


def _triton_hooked() -> bool:
    import triton

    runtime = triton.knobs.runtime
    return triton_hook_set(runtime.launch_enter_hook) or triton_hook_set(runtime.launch_exit_hook)


def stats() -> dict[str, int]:
    """Counts since start: ``relaunched`` (calls run from C++), ``python`` (calls that ran
    the Python kernel), ``kept`` (calls whose launches were kept), ``unkeyed`` (calls with
    arguments of a kind not keyed)."""
    return dict(_C._launch_cache_stats())


def clear() -> None:
    """Drop every kept launch: the next call of each key runs its Python kernel again."""
    _C._launch_cache_clear()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run every launch-cached op's Python kernel inside (nothing kept or relaunched)."""
    was = _C._launch_cache_enabled()
    _C._launch_cache_set_enabled(False)
    try:
        yield
    finally:
        _C._launch_cache_set_enabled(was)
