"""Which native device each flagos device mirrors, and so which Inductor code it gets."""

from __future__ import annotations

import functools

import torch


@functools.cache
def twin_of(index: int) -> str:
    """The native twin of flagos:index: "cpu" (host memory, sim) or "cuda" (CUDA HAL)."""
    return torch.flagos.get_device_properties(index).native_device


@functools.cache
def native_index(index: int) -> int:
    """The twin's device ordinal (-1 for the CPU)."""
    return torch.flagos.get_device_properties(index).native_device_index


def twins() -> set[str]:
    """The twins of every flagos device in this process."""
    return {twin_of(i) for i in range(torch.flagos.device_count())}
