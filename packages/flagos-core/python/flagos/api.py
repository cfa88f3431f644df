"""``torch.flagos``: the everyday ``torch.cuda`` API, for flagos devices."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from typing_extensions import Self

from flagos import _C

__all__ = [
    "Event", "Stream", "current_device", "current_stream", "default_stream", "device",
    "device_count", "device_fault", "empty_cache", "get_amp_supported_dtype", "get_device_name",
    "get_device_properties", "get_rng_state", "get_rng_state_all", "init", "initial_seed",
    "is_available", "is_initialized", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved",
    "memory_snapshot", "memory_stats", "memory_summary", "reset_accumulated_memory_stats",
    "reset_peak_memory_stats", "seed", "seed_all", "set_device", "set_rng_state",
    "set_rng_state_all", "set_stream", "stream", "synchronize", "twin_device",
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


def device_fault(dev: DeviceLike = None) -> str | None:
    """Why the device is unusable, or ``None`` while it is usable. After a HAL call fails
    with a device fault and the device fails a probe too (a real device fault, as a CUDA
    context after a sticky error), every later call to it fails: this is the first error,
    and the process must be restarted to use the device again."""
    return _C._device_fault(_index(dev))


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


def set_device(dev: DeviceLike) -> None:
    """Make ``dev`` the current flagos device of this thread."""
    _C._set_device(_index(dev))


class device:
    """Context manager that changes the current flagos device."""

    def __init__(self, dev: DeviceLike) -> None:
        self.idx = _index(dev)
        self.prev = -1

    def __enter__(self) -> None:
        self.prev = _C._current_device()
        if self.idx != self.prev:
            _C._set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.prev != self.idx:
            _C._set_device(self.prev)


def synchronize(dev: DeviceLike = None) -> None:
    """Wait for all work on every stream of the device."""
    _C._synchronize(_index(dev))


@dataclass(frozen=True)
class DeviceProperties:
    """Properties of one flagos device, as its HAL reports them.

    ``native_device`` is what the HAL says can address its memory ("none", "cpu" or
    "cuda"); ``twin_device`` is the twin the flagos engines, boxing, compile and
    distributed actually use: the same, or "none" when ``FLAGOS_NO_HOST_ALIAS`` makes every
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


def get_device_properties(dev: DeviceLike = None) -> DeviceProperties:
    """Name, memory, compute units, HAL and twin device of a flagos device."""
    index = _index(dev)
    p = {**_C._device_properties(index), "twin_device": _C._twin_device(index)}
    return DeviceProperties(**{k: p[k] for k in DeviceProperties.__dataclass_fields__})


def twin_device(dev: DeviceLike = None) -> torch.device | None:
    """The native torch device whose kernels run on this flagos device's memory in place
    (``cpu`` for sim, ``cuda:N`` for a CUDA-addressable HAL), or None when there is none."""
    p = get_device_properties(dev)
    if p.twin_device == "none":
        return None
    return torch.device(p.twin_device, None if p.twin_device == "cpu" else p.native_device_index)


def get_device_name(dev: DeviceLike = None) -> str:
    """The device's name, as its HAL reports it."""
    return get_device_properties(dev).name


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
    """A flagos event; ``enable_timing=True`` makes elapsed_time available."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> Self:
        if interprocess:
            raise NotImplementedError("flagos: interprocess events are not supported")
        return super().__new__(cls, device="flagos", enable_timing=enable_timing,
                               blocking=blocking)

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded and completed)."""
        return _C._event_elapsed_time(self, end_event)


def current_stream(dev: DeviceLike = None) -> Stream:
    """The current stream of this thread on the device."""
    return _wrap(torch.accelerator.current_stream(torch.device("flagos", _index(dev))))


def default_stream(dev: DeviceLike = None) -> Stream:
    """The device's default stream."""
    return Stream(stream_id=0, device_index=_index(dev), device_type=_flagos_type())


def _flagos_type() -> int:
    return torch.accelerator.current_stream(torch.device("flagos", 0)).device_type


def set_stream(s: torch.Stream) -> None:
    """Make ``s`` the current stream of its device for this thread."""
    torch.accelerator.set_stream(s)


@contextlib.contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Context manager: run the block with ``s`` as the current stream (None: no change)."""
    if s is None:
        yield
        return
    prev = torch.accelerator.current_stream(s.device)
    prev_dev = current_device()
    set_device(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)
        set_device(prev_dev)


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


def get_rng_state(dev: DeviceLike = None) -> torch.Tensor:
    """The generator state of a device, as a CPU ByteTensor."""
    return _C._default_generator(_index(dev)).get_state()


def set_rng_state(state: torch.Tensor, dev: DeviceLike = None) -> None:
    """Restore a device's generator state from get_rng_state()."""
    _C._default_generator(_index(dev)).set_state(state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    """Every device's generator state."""
    return [g.get_state() for g in _default_generators()]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    """Restore every device's generator state."""
    for g, s in zip(_default_generators(), states, strict=True):
        g.set_state(s.cpu())


# ---- memory -------------------------------------------------------------------------

def memory_stats(dev: DeviceLike = None) -> dict[str, int]:
    """Caching-allocator statistics of a device (torch.cuda.memory_stats keys)."""
    return dict(sorted(_C._memory_stats(_index(dev))))


def memory_allocated(dev: DeviceLike = None) -> int:
    """Bytes held by live tensors on the device."""
    return memory_stats(dev)["allocated_bytes.all.current"]


def max_memory_allocated(dev: DeviceLike = None) -> int:
    """Peak of memory_allocated since the start or the last reset_peak_memory_stats."""
    return memory_stats(dev)["allocated_bytes.all.peak"]


def memory_reserved(dev: DeviceLike = None) -> int:
    """Bytes the allocator holds from the HAL (allocated plus cached)."""
    return memory_stats(dev)["reserved_bytes.all.current"]


def max_memory_reserved(dev: DeviceLike = None) -> int:
    """Peak of memory_reserved."""
    return memory_stats(dev)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(dev: DeviceLike = None) -> None:
    """Reset the peaks to the current values (current values are kept)."""
    _C._reset_peak_memory_stats(_index(dev))


def reset_accumulated_memory_stats(dev: DeviceLike = None) -> None:
    """Reset the allocated/freed counters and the retry and OOM counts."""
    _C._reset_accumulated_memory_stats(_index(dev))


def empty_cache() -> None:
    """Return cached, unused device and pinned memory to the HAL."""
    _C._empty_cache()


def mem_get_info(dev: DeviceLike = None) -> tuple[int, int]:
    """(free, total) device memory in bytes, as the HAL sees it."""
    return tuple(_C._mem_get_info(_index(dev)))


def memory_snapshot() -> list[dict]:
    """Segments held by the allocator, each with its blocks."""
    return _C._memory_snapshot()


def memory_summary(dev: DeviceLike = None, abbreviated: bool = False) -> str:
    """A readable table of the allocator statistics of a device."""
    s = memory_stats(dev)

    def mib(n: int) -> str:
        return f"{n / 2**20:10.2f} MiB"

    rows = [("Allocated memory", "allocated_bytes"), ("Active memory", "active_bytes"),
            ("Requested memory", "requested_bytes"), ("Reserved memory", "reserved_bytes"),
            ("Non-releasable memory", "inactive_split_bytes")]
    counts = [("Allocations", "allocation"), ("Active allocs", "active"),
              ("Device reserved segments", "segment"), ("Non-releasable allocs", "inactive_split")]
    idx = _index(dev)
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
