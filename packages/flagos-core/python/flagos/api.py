"""``torch.flagos``: the everyday ``torch.cuda`` API, for flagos devices."""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from typing_extensions import Self, deprecated

from flagos import _C, amp, graphs
from flagos.graphs import (
    Graph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)

__all__ = [
    "Event",
    "Graph",
    "OutOfMemoryError",
    "Stream",
    "StreamContext",
    "amp",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_fault",
    "device_memory_used",
    "device_of",
    "empty_cache",
    "get_allocator_backend",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "graph",
    "graph_pool_handle",
    "graphs",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "make_graphed_callables",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
    "twin_device",
]

DeviceLike = torch.device | str | int | None


def _index(dev: DeviceLike = None, optional: bool = True) -> int:
    """A flagos device index from an int, 'flagos:N', a torch.device or None (current)."""
    if dev is None:
        return _C._current_device()
    if isinstance(dev, str):
        dev = torch.device(dev)
    if isinstance(dev, torch.device):
        if dev.type != "flagos":
            raise ValueError(f"expected a flagos device, got {dev}")
        return _C._current_device() if dev.index is None else dev.index
    index = int(dev)
    if index == -1 and optional:
        return _C._current_device()
    if not 0 <= index < _C._device_count():
        raise ValueError(f"invalid flagos device {index}: {_C._device_count()} device(s) present")
    return index


def is_available() -> bool:
    """True when at least one flagos device is present and usable (not lost after a device
    fault: see :func:`device_fault`)."""
    return any(_C._device_fault(i) is None for i in range(_C._device_count()))


def device_fault(device: DeviceLike = None) -> str | None:
    """Why the device is unusable, or ``None`` while it is usable. After a HAL call fails
    with a device fault and the device fails a probe too (a real device fault, as a CUDA
    context after a sticky error), every later call to it fails: this is the first error,
    and the process must be restarted to use the device again."""
    return _C._device_fault(_index(device))


def is_initialized() -> bool:
    """True once the HALs are loaded (flagos initializes at import)."""
    return _C._hals_initialized()


def __getattr__(name: str) -> object:
    # torch.utils.checkpoint saves and restores a device module's RNG state only where its
    # ``_initialized`` is true (torch.cuda's flag): without it, a checkpointed region's
    # recomputation would draw other dropout masks than its forward.
    if name == "_initialized":
        return _C._hals_initialized()
    # torch.cuda.default_generators' counterpart: a tuple, one generator per device, which
    # torch itself indexes (torch._prims.rng_prims).
    if name == "default_generators":
        return _default_generators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_in_bad_fork() -> bool:
    """True in a child forked from a process that had initialized flagos."""
    return _C._in_bad_fork()


def _lazy_init() -> None:
    """Kept for torch internals that call ``torch.<backend>._lazy_init``."""


def init() -> None:
    """``torch.cuda.init``'s counterpart. flagos initializes when it is imported; this
    raises when no flagos device is usable, naming the loaded HALs."""
    if device_count() == 0:
        hals = ", ".join(f"{h['name']} ({h['version']})" for h in _C._hal_info()) or "none"
        raise RuntimeError(f"flagos: no device is available; HALs loaded: {hals}. Set "
                           "FLAGOS_HAL to a HAL whose runtime and devices are present")


def device_count() -> int:
    """Number of flagos devices over all loaded HALs."""
    return _C._device_count()


def current_device() -> int:
    """Index of the current flagos device of this thread."""
    return _C._current_device()


def set_device(device: DeviceLike) -> None:
    """Make ``device`` the current flagos device of this thread."""
    _C._set_device(_index(device))


class device:
    """Context manager that makes ``device`` the current flagos device inside its block
    (-1: no change), as ``torch.cuda.device``."""

    def __init__(self, device: DeviceLike) -> None:
        self.idx = -1 if isinstance(device, int) and device == -1 else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = _C._current_device()
        if self.idx not in (-1, self.prev_idx):
            _C._set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.idx not in (-1, self.prev_idx):
            _C._set_device(self.prev_idx)


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor or storage) current;
    no change when ``obj`` is not on a flagos device, as ``torch.cuda.device_of``."""

    def __init__(self, obj: torch.Tensor | torch.UntypedStorage | torch.TypedStorage) -> None:
        super().__init__(obj.get_device() if obj.device.type == "flagos" else -1)


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on every stream of the device."""
    _C._synchronize(_index(device))


@dataclass(frozen=True)
class DeviceProperties:
    """Properties of one flagos device, as its HAL reports them.

    ``native_device`` is what the HAL says can address its memory ("none", "cpu" or
    "cuda"); ``twin_device`` is the twin the flagos engines, boxing, compile and
    distributed actually use: the same, or "none" when ``FLAGOS_NO_TWIN`` makes every
    HAL count as opaque. Code above the HAL decides by ``twin_device``, never by HAL name.
    """

    name: str
    total_memory: int
    multi_processor_count: int
    major: int
    minor: int
    hal: str
    hal_path: str
    hal_device_index: int
    native_device: str
    native_device_index: int
    twin_device: str


def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    """Name, memory, compute units, HAL and twin device of a flagos device."""
    index = _index(device)
    p = {**_C._device_properties(index), "twin_device": _C._twin_device(index)}
    return DeviceProperties(**{k: p[k] for k in DeviceProperties.__dataclass_fields__})


def twin_device(device: DeviceLike = None) -> torch.device | None:
    """The native torch device whose kernels run on this flagos device's memory in place
    (``cpu`` for sim, ``cuda:N`` for a CUDA-addressable HAL), or None when there is none."""
    p = get_device_properties(device)
    if p.twin_device == "none":
        return None
    return torch.device(p.twin_device, None if p.twin_device == "cpu" else p.native_device_index)


def get_device_name(device: DeviceLike = None) -> str:
    """The device's name, as its HAL reports it."""
    return get_device_properties(device).name


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes torch.autocast('flagos') may cast to."""
    return [torch.float16, torch.bfloat16]


# ---- streams and events -------------------------------------------------------------

class Stream(torch.Stream):
    """A flagos stream (a HAL stream); lower priority numbers run first."""

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> Self:
        if "stream_id" in kwargs:  # rebuilt from an existing stream
            return super().__new__(cls, **kwargs)
        with globals()["device"](device):
            return super().__new__(cls, device=torch.device("flagos", _index(device)),
                                   priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.device_index, self.stream_id)

    def __repr__(self) -> str:
        return f"<torch.flagos.Stream device=flagos:{self.device_index} id={self.stream_id}>"


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


class Event(torch.Event):
    """A flagos event; ``enable_timing=True`` makes elapsed_time available.
    ``interprocess`` and ``external`` events are not supported (NotImplementedError)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False, external: bool = False) -> Self:
        if interprocess:
            raise NotImplementedError("flagos: interprocess events are not supported")
        if external:
            raise NotImplementedError("flagos: external events (recorded inside a graph "
                                      "capture) are not supported")
        return super().__new__(cls, device="flagos", enable_timing=enable_timing,
                               blocking=blocking)

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded and completed)."""
        return _C._event_elapsed_time(self, end_event)


def current_stream(device: DeviceLike = None) -> Stream:
    """The current stream of this thread on the device."""
    index = _index(device)
    return Stream(stream_id=_C._current_stream_id(index), device_index=index,
                  device_type=_flagos_type())


def default_stream(device: DeviceLike = None) -> Stream:
    """The device's default stream."""
    return Stream(stream_id=0, device_index=_index(device), device_type=_flagos_type())


@functools.cache
def _flagos_type() -> int:
    return torch.accelerator.current_stream(torch.device("flagos", 0)).device_type


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device for this thread, and its device the
    current device."""
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager: ``stream`` (and its device) current inside the block, the previous
    stream of both devices and the previous device restored after it; ``None``: no change.
    As ``torch.cuda.StreamContext``."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.src_prev_stream: torch.Stream | None = None
        self.dst_prev_stream: torch.Stream | None = None

    def __enter__(self) -> None:
        cur = self.stream
        if cur is None:
            return
        self.src_prev_stream, self.dst_prev_stream = current_stream(None), None
        # the stream's own device keeps its current stream too, restored on exit
        if self.src_prev_stream.device != cur.device:
            self.dst_prev_stream = current_stream(cur.device)
        torch.accelerator.set_stream(cur)

    def __exit__(self, *exc: object) -> None:
        cur = self.stream
        if cur is None:
            return
        if self.dst_prev_stream is not None:
            torch.accelerator.set_stream(self.dst_prev_stream)
        torch.accelerator.set_stream(self.src_prev_stream)


def stream(stream: torch.Stream | None) -> StreamContext:
    """Context manager: run the block with ``stream`` as the current stream, on its device
    (None: no change)."""
    return StreamContext(stream)


# ---- random numbers -----------------------------------------------------------------

def _default_generators() -> tuple[torch.Generator, ...]:
    return tuple(_C._default_generator(i) for i in range(device_count()))


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    _C._default_generator(current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every flagos device's default generator."""
    for g in _default_generators():
        g.manual_seed(int(seed))


def seed() -> int:
    """Seed the current device's generator with a random number; returns it."""
    return _C._default_generator(current_device()).seed()


def seed_all() -> None:
    """Seed every device's generator with one random number."""
    s = seed()
    manual_seed_all(s)


def initial_seed() -> int:
    """The current device's initial seed."""
    return _C._default_generator(current_device()).initial_seed()


def get_rng_state(device: DeviceLike = None) -> torch.Tensor:
    """The generator state of a device, as a CPU ByteTensor."""
    return _C._default_generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = None) -> None:
    """Restore a device's generator state from get_rng_state()."""
    _C._default_generator(_index(device)).set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    """Every device's generator state."""
    return [g.get_state() for g in _default_generators()]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore the generator state of devices 0, 1, ... from ``new_states`` in order."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---- memory -------------------------------------------------------------------------

# What an allocation that does not fit raises, with the numbers (torch.cuda's as well).
OutOfMemoryError = torch.OutOfMemoryError


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    """Caching-allocator statistics of a device (torch.cuda.memory_stats keys)."""
    return dict(sorted(_C._memory_stats(_index(device))))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by live tensors on the device."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of memory_allocated since the start or the last reset_peak_memory_stats."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes the allocator holds from the HAL (allocated plus cached)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    """Peak of memory_reserved."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Reset the peaks to the current values (current values are kept)."""
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Reset the allocated/freed counters and the retry and OOM counts."""
    _C._reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Return cached, unused device and pinned memory to the HAL."""
    _C._empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) device memory in bytes, as the HAL sees it."""
    return tuple(_C._mem_get_info(_index(device)))


def memory_snapshot() -> list[dict]:
    """Segments held by the allocator, each with its blocks."""
    return _C._memory_snapshot()


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A readable table of the allocator statistics of a device."""
    s = memory_stats(device)

    def mib(n: int) -> str:
        return f"{n / 2**20:10.2f} MiB"

    rows = [("Allocated memory", "allocated_bytes"), ("Active memory", "active_bytes"),
            ("Requested memory", "requested_bytes"), ("Reserved memory", "reserved_bytes"),
            ("Non-releasable memory", "inactive_split_bytes")]
    counts = [("Allocations", "allocation"), ("Active allocs", "active"),
              ("Device reserved segments", "segment"), ("Non-releasable allocs", "inactive_split")]
    idx = _index(device)
    lines = [f"flagos memory summary, device flagos:{idx} ({get_device_name(idx)})",
             f"{'':28}{'current':>15}{'peak':>15}{'total alloc':>15}{'total freed':>15}"]
    for title, key in rows:
        lines.append(f"{title:28}" + "".join(
            f"{mib(s[f'{key}.all.{f}']):>15}" for f in ("current", "peak", "allocated", "freed")))
    for title, key in counts:
        lines.append(f"{title:28}" + "".join(
            f"{s[f'{key}.all.{f}']:>15}" for f in ("current", "peak", "allocated", "freed")))
    lines.append(f"{'OOMs':28}{s['num_ooms']:>15}   alloc retries: {s['num_alloc_retries']}")
    return "\n".join(lines)


def memory_stats_as_nested_dict(device: DeviceLike = None) -> dict[str, Any]:
    """memory_stats() as a nested dictionary, split at its keys' dots
    (``{"allocated_bytes": {"all": {"current": n, ...}, ...}, ..., "num_ooms": n}``)."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        level = nested
        for part in path:
            level = level.setdefault(part, {})
        level[last] = value
    return nested


@deprecated("`torch.flagos.memory_cached` has been renamed to `torch.flagos.memory_reserved`",
            category=FutureWarning)
def memory_cached(device: DeviceLike = None) -> int:
    """Deprecated, as ``torch.cuda.memory_cached``: see memory_reserved()."""
    return memory_reserved(device)


@deprecated("`torch.flagos.max_memory_cached` has been renamed to "
            "`torch.flagos.max_memory_reserved`", category=FutureWarning)
def max_memory_cached(device: DeviceLike = None) -> int:
    """Deprecated, as ``torch.cuda.max_memory_cached``: see max_memory_reserved()."""
    return max_memory_reserved(device)


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    """Deprecated, as ``torch.cuda.reset_max_memory_allocated``: resets every peak
    (reset_peak_memory_stats())."""
    warnings.warn("torch.flagos.reset_max_memory_allocated now calls "
                  "torch.flagos.reset_peak_memory_stats, which resets /all/ peak memory stats.",
                  FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: DeviceLike = None) -> None:
    """Deprecated, as ``torch.cuda.reset_max_memory_cached``: resets every peak
    (reset_peak_memory_stats())."""
    warnings.warn("torch.flagos.reset_max_memory_cached now calls "
                  "torch.flagos.reset_peak_memory_stats, which resets /all/ peak memory stats.",
                  FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def get_allocator_backend() -> str:
    """The allocator in use: ``"native"`` (the caching allocator) or ``"passthrough"`` (one
    HAL allocation per tensor, ``FLAGOS_ALLOCATOR=passthrough``)."""
    return "passthrough" if _C._allocator_passthrough() else "native"


def device_memory_used(device: DeviceLike = None) -> int:
    """Bytes of the device's memory in use, by every user of the device, as its HAL counts
    them (total minus free of mem_get_info())."""
    free, total = mem_get_info(device)
    return total - free


# Blocks handed out by caching_allocator_alloc, by address, until caching_allocator_delete.
_raw_blocks: dict[int, torch.Tensor] = {}
_raw_lock = threading.Lock()


def caching_allocator_alloc(size: int, device: DeviceLike = None,
                            stream: torch.Stream | None = None) -> int:
    """Allocate ``size`` bytes from the flagos caching allocator on ``device`` for use on
    ``stream`` (default: the device's current stream) and return the address, for other
    frameworks' use; caching_allocator_delete() gives it back. Counted in memory_stats()."""
    index = _index(device)
    if stream is None:
        stream = current_stream(index)
    if not isinstance(stream, torch.Stream):
        raise TypeError(f"flagos: stream must be a torch.flagos.Stream, got {type(stream)}")
    if stream.device != torch.device("flagos", index):
        raise ValueError(f"flagos: stream {stream} is not on flagos:{index}")
    if size == 0:
        return 0
    with StreamContext(stream):
        block = torch.empty(size, dtype=torch.uint8, device=torch.device("flagos", index))
    with _raw_lock:
        _raw_blocks[block.data_ptr()] = block
    return block.data_ptr()


def caching_allocator_delete(mem_ptr: int) -> None:
    """Give memory from caching_allocator_alloc() back to the caching allocator (0: no-op);
    like a tensor's, it is reused only after the work queued on its stream is done."""
    if mem_ptr == 0:
        return
    with _raw_lock:
        block = _raw_blocks.pop(mem_ptr, None)
    if block is None:
        raise RuntimeError(f"flagos: invalid device pointer {mem_ptr:#x}: not allocated by "
                           "torch.flagos.caching_allocator_alloc, or already deleted")
    del block


# ---- dtypes -------------------------------------------------------------------------

def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the current flagos device computes in bfloat16. Natively: its twin decides
    (a CUDA twin: ``torch.cuda.is_bf16_supported(False)`` on that GPU; the CPU twin of sim:
    the CPU's bfloat16 instructions, as oneDNN sees them; no twin: False). With
    ``including_emulation``, also True where bfloat16 ops run on the device at all (checked
    once per device by running one)."""
    if not is_available():
        return False
    index = current_device()
    twin = twin_device(index)
    if twin is not None and twin.type == "cuda":
        with torch.cuda.device(twin):
            native = torch.cuda.is_bf16_supported(including_emulation=False)
    elif twin is not None and twin.type == "cpu":
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    else:
        native = False
    if native or not including_emulation:
        return native
    return _bf16_runs(index)


@functools.cache
def _bf16_runs(index: int) -> bool:
    """One bfloat16 op on flagos:index gives the right result."""
    try:
        x = torch.tensor([1.5, -2.0], dtype=torch.bfloat16, device=torch.device("flagos", index))
        return torch.equal((x * x).cpu(), torch.tensor([2.25, 4.0], dtype=torch.bfloat16))
    except RuntimeError:  # a device without bfloat16 (NotImplementedError is one too)
        return False
