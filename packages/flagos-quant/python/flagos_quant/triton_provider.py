"""The op provider ``quant-triton``: flagos-quant's packed linear kernels
(:mod:`.triton_linear`, which dequantize the FP8 / NVFP4 weight in registers) on flagos
tensors of devices without a twin.

With a CUDA twin, ``boxing`` runs these kernels on the twin's tensors through Triton's own
CUDA driver. A chip without CUDA (or a GPU with ``FLAGOS_NO_TWIN=1``) has no twin: there
the kernels are compiled by Triton for the target the device's HAL names and launched
through the HAL (:mod:`flagos.triton_driver`), on the flagos tensors themselves, so a
batch-1 decode step reads each packed weight once instead of dequantizing it into a
temporary (the ``emulation`` formula). The calls are replayable: a call's launches are a
function of its arguments' metadata, and flagos repeats them from C++ for later calls
(:mod:`flagos.launch_cache`). Unavailable, with the reason, where a device has a twin,
where Triton is not installed and where no Triton backend compiles for the HAL.
"""

from __future__ import annotations

import functools

import torch
from flagos import launch_cache
from flagos.routing import Provider

from .fused_linear import FP8_WEIGHT_LINEAR, NVFP4_WEIGHT_LINEAR, fp8_triton, nvfp4_triton

__all__ = ["TritonKernelsProvider", "provider"]

_KERNELS = {FP8_WEIGHT_LINEAR: launch_cache.watched(fp8_triton),
            NVFP4_WEIGHT_LINEAR: launch_cache.watched(nvfp4_triton)}


@functools.cache
def _unavailable(hal: str | None) -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return f"not installed: Triton is missing ({e})"
    count = torch.flagos.device_count()
    if count == 0:
        return "no flagos device"
    twins = {torch.flagos.get_device_properties(i).twin_device for i in range(count)}
    if twins - {"", "none"}:
        return (f"flagos devices have a twin ({', '.join(sorted(twins))}): boxing runs these "
                "kernels there")
    from flagos import triton_driver

    try:
        triton_driver.target(0)
    except (RuntimeError, NotImplementedError) as e:
        return str(e)
    return None


@functools.cache
def _hal_driver() -> object:
    """Triton's active driver, made flagos' HAL driver where it is not one already."""
    import triton
    from flagos import triton_driver

    active = triton.runtime.driver.active
    return active if isinstance(active, triton_driver.HalDriver) else triton_driver.activate()


class TritonKernelsProvider(Provider):
    """Serves ``flagos_quant::fp8_weight_linear`` and ``nvfp4_weight_linear`` with
    flagos-quant's Triton kernels, launched through the HAL, on devices without a twin."""

    name = "quant-triton"
    replayable_ops = frozenset(_KERNELS)

    def serves(self, op: str) -> bool:
        return op in _KERNELS

    def unavailable_on(self, hal: str | None) -> str | None:
        return _unavailable(hal)

    def __call__(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
        kernel = _KERNELS.get(op._schema.name)
        if kernel is None:
            return NotImplemented
        _hal_driver()
        return kernel(*args, **kwargs)


def provider() -> TritonKernelsProvider:
    """Entry point of group ``flagos.ops``."""
    return TritonKernelsProvider()
