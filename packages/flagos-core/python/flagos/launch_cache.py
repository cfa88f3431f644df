"""The launch cache: ops whose Python kernel is a few launches of compiled kernels,
relaunched from C++ on repeated calls.

A Triton kernel's Python wrapper costs tens of microseconds of host time per call (its
checks, the binding of each argument, the launch through Python), more than the GPU time
of a small kernel: a decode step at batch 1 is bound by it. :func:`register` puts a C++
kernel in the op's place for one device type. It keys each call by its arguments'
metadata (each tensor's dtype, device, sizes, strides and 16-byte alignment, every other
argument's value); the first call of a key runs the Python kernel, whose launches through
the HAL (:mod:`flagos.kernels`, :mod:`flagos.triton_driver`) record themselves; later
calls of the key allocate the results as recorded and launch the kernels in order from
C++ through the HAL on the current stream, with no Python. An op registered for a twin
(``"cuda"``, run on views of flagos memory) launches through the HAL too: a Triton kernel
compiled by the twin's driver is loaded through the HAL for it
(:class:`flagos.triton_driver.HalCompiled`).

Registering an op states that its Python kernel's launches (grids, constants, which
argument each pointer is) and its results' shapes depend on its arguments' metadata only,
and that the launches are the kernel's whole device work; the code that launches records
only calls where that holds, and a recorded call that runs an ATen op that computes (a
fill, a copy, arithmetic: work a relaunch would not do) is not kept. Launches are kept only where every pointer they pass is the data pointer of
exactly one argument, element of a list argument or result, or, on flagos tensors, points into exactly one
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
from typing import TYPE_CHECKING

from flagos import _C

if TYPE_CHECKING:
    import torch

__all__ = ["clear", "disabled", "hal_device_for", "not_kept", "not_kept_since", "pack_params", "param_kinds",
           "recording", "register", "spoil_recording", "stats", "triton_hook_set", "watched"]

# Triton's scalar parameter types (the compiled kernel's signature) as C sizes
_INT_BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u1": 1, "u8": 1, "u16": 2,
              "u32": 4, "u64": 8}
_FLOAT_FORMATS = {"fp16": ("<e", "<H", 2), "fp32": ("<f", "<I", 4), "f32": ("<f", "<I", 4),
                  "fp64": ("<d", "<Q", 8)}
# Each mirrored type's parameter kind for flagos._C._TypedLauncher (typed_launch.cpp)
_KINDS = {**{ty: str(n) for ty, n in _INT_BYTES.items()}, "fp16": "h", "bf16": "b", "fp32": "f",
          "f32": "f", "fp64": "d", "constexpr": "c"}
_DISPATCH_KEYS = {"flagos": "PrivateUse1", "cuda": "CUDA"}


def register(op: str, device_type: str, kernel: Callable) -> None:
    """Put the launch-cached kernel in place of ``op`` ("ns::name[.overload]", defined
    already) for ``device_type``, ``kernel`` the op's Python kernel (called as a
    ``torch.library`` kernel): "flagos", where the kernel runs on flagos tensors, or
    "cuda", a twin's, where it runs on views of flagos memory; either way the launches it
    makes through the HAL (:mod:`flagos.kernels`, :class:`flagos.triton_driver.HalCompiled`
    on the flagos device :func:`hal_device_for` names) are recorded, and a launch made
    otherwise must :func:`spoil_recording`."""
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


def spoil_recording(why: str | None = None) -> None:
    """The running launch-cached kernel does device work that is not a launch through the HAL
    (a launch through a twin's own driver, say): this call's launches are not kept, counted
    in :func:`not_kept` under ``why`` (default: device work besides its launches)."""
    _C._launch_cache_spoil_recording(why)


def hal_device_for(device: torch.device) -> int | None:
    """The flagos device whose HAL launches a launch-cached op's call on ``device`` makes
    now so that they can be kept: flagos:N itself, or the flagos device whose twin
    ``device`` is while the twin's current stream is that device's current stream (the
    launch then is ordered as the twin's own would be); None where there is none."""
    index = _C._launch_cache_hal_device_for(str(device))
    return None if index < 0 else index


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


def stats() -> dict[str, int]:
    """Counts since start: ``relaunched`` (calls run from C++), ``python`` (calls that ran
    the Python kernel), ``kept`` (calls whose launches were kept), ``unkeyed`` (calls with
    arguments of a kind not keyed)."""
    return dict(_C._launch_cache_stats())


def not_kept() -> dict[str, int]:
    """Recorded calls whose launches were not kept, counted by why (the first reason each
    call met: device work besides its launches, a result that is no fresh tensor, a pointer
    to memory that is no argument, result or temporary, ...), since start. What to read
    when an op meant to be relaunched keeps running its Python kernel."""
    return dict(_C._launch_cache_not_kept())


def not_kept_since(before: dict[str, int]) -> dict[str, int]:
    """The calls not kept since ``before`` (an earlier :func:`not_kept`), by why, the most
    frequent reason first; reasons with none left out."""
    since = {why: n - before.get(why, 0) for why, n in not_kept().items()}
    return {why: n for why, n in sorted(since.items(), key=lambda i: -i[1]) if n}


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
