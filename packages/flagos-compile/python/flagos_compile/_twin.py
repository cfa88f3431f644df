"""Which native device each flagos device mirrors, and so which Inductor code it gets."""

from __future__ import annotations

import functools

import torch


@functools.cache
def twin_of(index: int) -> str:
    """The native twin of flagos:index: "cpu" (host memory, sim), "cuda" (CUDA HAL), or
    "none" (opaque memory)."""
    return torch.flagos.get_device_properties(index).twin_device


@functools.cache
def native_index(index: int) -> int:
    """The twin's device ordinal (-1 for the CPU)."""
    return torch.flagos.get_device_properties(index).native_device_index


def twins() -> set[str]:
    """The twins of every flagos device in this process."""
    return {twin_of(i) for i in range(torch.flagos.device_count())}


def cuda_twin(device: torch.device) -> torch.device | None:
    """The CUDA device a flagos device mirrors (its memory and streams are that device's),
    or None when the device is not flagos or its twin is not CUDA."""
    if not isinstance(device, torch.device) or device.type != "flagos":
        return None
    index = device.index if device.index is not None else torch.flagos.current_device()
    if twin_of(index) != "cuda":
        return None
    return torch.device("cuda", native_index(index))
