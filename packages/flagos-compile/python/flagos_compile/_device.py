"""Dynamo's view of the flagos device: a DeviceInterface over torch.flagos.

Dynamo uses it to trace ``torch.flagos`` stream/event/device calls and Inductor uses it
for device properties, the current device and raw streams of the generated code.
"""

from __future__ import annotations

from typing import Any

import torch
from flagos.provider_api import current_raw_stream
from torch._dynamo.device_interface import DeviceInterface, caching_worker_current_devices

from flagos_compile._twin import native_index, twin_of

_props_cache: list[Any] = []


def _index(device: torch.types.Device) -> int:
    if device is None:
        return torch.flagos.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return torch.flagos.current_device() if device.index is None else device.index
    return int(device)


def raw_stream(device_idx: int) -> int:
    """The native handle of the current flagos stream of a device (a cudaStream_t on
    the CUDA HAL: what a Triton launcher needs; an opaque HAL handle on sim)."""
    return current_raw_stream(device_idx)


class FlagosInterface(DeviceInterface):
    """torch.flagos behind the interface Dynamo and Inductor expect of a device."""

    device = torch.flagos.device  # type: ignore[assignment]
    Event = torch.flagos.Event  # type: ignore[assignment]
    Stream = torch.flagos.Stream  # type: ignore[assignment]

    class Worker:
        """Device queries that work in compile workers (recorded in the parent)."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices["flagos"] = device

        @staticmethod
        def current_device() -> int:
            if "flagos" in caching_worker_current_devices:
                return caching_worker_current_devices["flagos"]
            return torch.flagos.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if not _props_cache:
                _props_cache.extend(
                    torch.flagos.get_device_properties(i)
                    for i in range(torch.flagos.device_count()))
            if device is None:
                return _props_cache[FlagosInterface.Worker.current_device()]
            return _props_cache[_index(device)]

    current_device = staticmethod(torch.flagos.current_device)
    set_device = staticmethod(torch.flagos.set_device)
    device_count = staticmethod(torch.flagos.device_count)
    stream = staticmethod(torch.flagos.stream)  # type: ignore[assignment]
    current_stream = staticmethod(torch.flagos.current_stream)
    set_stream = staticmethod(torch.flagos.set_stream)  # type: ignore[assignment]
    synchronize = staticmethod(torch.flagos.synchronize)
    memory_allocated = staticmethod(torch.flagos.memory_allocated)
    get_raw_stream = staticmethod(raw_stream)  # type: ignore[assignment]

    @staticmethod
    def is_available() -> bool:
        return torch.flagos.is_available()

    @staticmethod
    def get_device_properties(device: torch.types.Device = None) -> Any:
        return torch.flagos.get_device_properties(_index(device))

    @staticmethod
    def exchange_device(device: int) -> int:
        prev = torch.flagos.current_device()
        if device >= 0 and device != prev:
            torch.flagos.set_device(device)
        return prev

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return FlagosInterface.exchange_device(device)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.flagos.set_stream(torch.flagos.Stream(
            stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        i = _index(device)
        if twin_of(i) == "cuda":
            major, minor = torch.cuda.get_device_capability(native_index(i))
            return major * 10 + minor
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return torch.bfloat16 in torch.flagos.get_amp_supported_dtype()

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        """Triton kernels are generated for CUDA-addressable HALs only."""
        return twin_of(_index(device)) == "cuda"

    @classmethod
    def raise_if_triton_unavailable(cls, device: torch.types.Device = None) -> None:
        if not cls.is_triton_capable(device):
            raise RuntimeError(
                "flagos: this device's twin is the CPU; Inductor generates C++ kernels for it, "
                "not Triton")
        import triton.backends

        if "nvidia" not in triton.backends.backends:
            raise RuntimeError("triton not built with the 'nvidia' backend")
