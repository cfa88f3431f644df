"""Kernels on flagos devices through the HAL's kernel extension (ABI 1.2, optional).

A :class:`KernelModule` is a device binary image loaded onto one flagos device (a cubin on
the cuda HAL, a ``flagos-sim-kernels-v1`` library on sim, a vendor's format elsewhere:
:func:`formats` lists them); its kernels launch on the current flagos stream with flagos
tensors' device pointers, in order with the ops before and after them::

    module = flagos.kernels.KernelModule(0, "flagos-sim-kernels-v1", image)
    add = module.kernel("vector_add", ("*fp32", "*fp32", "*fp32", "i64"))
    add.launch((blocks, 1, 1), (64, 1, 1), a, b, out, n)

The signature names each parameter's type as Triton does (``*fp32`` a pointer, passed a
tensor or an address; ``i32``, ``i64``, ``fp32``, ... a value), or ``bytes``: a value
passed by value as its bytes, such as a tensor descriptor :func:`encode_tensor_descriptor`
made (a launch with one is never kept by the launch cache). A launch made inside a
launch-cached op's kernel (:mod:`flagos.launch_cache`) is recorded, so later calls with
the same argument metadata relaunch it from C++ without Python.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from flagos_hal import KernelTarget

from flagos import _C

__all__ = ["Kernel", "KernelModule", "KernelTarget", "encode_tensor_descriptor", "formats",
           "has_kernels", "target"]


def formats(device: int = 0) -> list[str]:
    """The image formats flagos:``device``'s HAL loads; [] when it has no kernel extension."""
    return list(_formats(device))


@functools.cache
def _formats(device: int) -> tuple[str, ...]:
    # what a HAL says of its devices never changes in a process; asked on every launch
    return tuple(f for f in _C._kernel_formats(device).split(",") if f)


def has_kernels(device: int = 0) -> bool:
    """Whether flagos:``device``'s HAL can load and launch kernels."""
    return bool(formats(device))


def target(device: int = 0) -> KernelTarget:
    """flagos:``device`` as a compiler target (the HAL's answer, ``flagos_hal.KernelTarget``);
    NotImplementedError without the extension."""
    return _target(device)


@functools.cache
def _target(device: int) -> KernelTarget:
    return KernelTarget(**_C._kernel_target(device))


def encode_tensor_descriptor(tensor: torch.Tensor, block: Sequence[int], *, element_type: int = 0,
                             swizzle: int = 0, fill_nan: bool = False) -> bytes:
    """The HAL's tensor descriptor (``kernel_encode_tensor_descriptor``, ABI 1.5) of a
    flagos ``tensor`` read in tiles of ``block`` elements per dimension: the bytes a kernel
    parameter of type ``bytes`` takes. ``element_type`` and ``swizzle`` are the codes of the
    device's backend (on the cuda HAL CUtensorMapDataType and CUtensorMapSwizzle; 0 on sim).
    The descriptor holds the tensor's address: launch it while the tensor lives.
    NotImplementedError where the HAL encodes none."""
    if tensor.device.type != "flagos":
        raise ValueError(f"flagos: a tensor descriptor of a {tensor.device} tensor; it describes "
                         "flagos memory")
    return _C._kernel_encode_tensor_descriptor(
        tensor.device.index or 0, tensor.data_ptr(), list(tensor.shape), list(tensor.stride()),
        [int(b) for b in block], tensor.element_size(), int(element_type), int(swizzle), bool(fill_nan))


class KernelModule:
    """An image loaded onto flagos:``device``; unloaded when no :class:`Kernel` of it and
    no kept launch needs it any more (after its queued launches)."""

    def __init__(self, device: int, fmt: str, image: bytes) -> None:
        self._module = _C._KernelModule(int(device), fmt, bytes(image))
        self.device = int(device)
        self.format = fmt

    def kernel(self, name: str, signature: Sequence[str]) -> Kernel:
        """The kernel ``name`` of this module, launched with parameters of ``signature``."""
        return Kernel(self, name, self._module.function(name), tuple(signature))

    def set_shared_memory(self, kernel: Kernel, size: int) -> None:
        """Allow launches of ``kernel`` ``size`` bytes of dynamic shared memory."""
        self._module.set_shared_memory(kernel.handle, int(size))


class Kernel:
    """One kernel of a :class:`KernelModule`."""

    def __init__(self, module: KernelModule, name: str, handle: int,
                 signature: tuple[str, ...]) -> None:
        from flagos import launch_cache

        self.module, self.name, self.handle, self.signature = module, name, handle, signature
        # Signatures of plain types launch through C++ launchers, one per one-dimensional
        # block and shared memory size (a launch's host cost is a small op's budget).
        self._kinds = launch_cache.param_kinds(signature)
        self._typed: dict[tuple[int, int], object] = {}

    def launch(self, grid: Sequence[int], block: Sequence[int], *args: object,
               shared: int = 0) -> None:
        """Queue a launch on the current flagos stream of the module's device: ``grid`` and
        ``block`` of up to three dimensions, ``args`` in the signature's order."""
        g = [int(x) for x in grid] + [1] * (3 - len(grid))
        b = [int(x) for x in block] + [1] * (3 - len(block))
        # recorded there for the launch cache when a launch-cached op's kernel runs
        if self._kinds is not None and b[1] == b[2] == 1 and b[0] > 0:
            typed = self._typed.get((b[0], int(shared)))
            if typed is None:
                typed = self._typed[(b[0], int(shared))] = _C._TypedLauncher(self._kinds, b[0], int(shared))
            typed.launch(self.module.device, self.handle, *g, None, self.module, args)
            return
        from flagos import launch_cache

        params = launch_cache.pack_params(self.signature, args)
        if params is None:
            raise TypeError(f"flagos: kernel {self.name!r}: a parameter type of {self.signature} "
                            "is not supported (pointers, integers, fp32, fp64, bytes)")
        _C._kernel_launch(self.module.device, self.handle, g, b, int(shared), params,
                          keepalive=self.module)
