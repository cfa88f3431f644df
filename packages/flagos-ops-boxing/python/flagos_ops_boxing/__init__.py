"""flagos-ops-boxing: run ATen ops zero-copy on the HAL's native twin device.

A flagos tensor whose HAL memory a native torch device can address (CPU for the
simulated device, CUDA for CUDA-addressable HALs) is viewed, without a copy, as a
tensor of that twin device; the twin's own kernel runs and the results are viewed back
as flagos. The caller's tensors are never mutated to do it: the views are separate
tensors sharing the bytes. The engine that does this is the flagos core's C++ "twin"
engine (it needs the storage, stream and allocator internals); this package decides
what the ``boxing`` provider serves: every op overload the installed torch has a kernel
for on the twin device (its own, or a composite one that runs on every device), read
from the operator registry.
"""

from __future__ import annotations

import functools

import torch
from flagos.routing import Provider

__all__ = ["BoxingProvider", "coverage", "provider"]

# Twin device of a HAL (DeviceProperties.twin_device) -> its dispatch key name.
_TWIN_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


@functools.cache
def _twin_key_of_hal(hal: str) -> str | None:
    from flagos.provider_api import twin_of_hal

    return _TWIN_KEYS.get(twin_of_hal(hal) or "")


# Hooks a PrivateUse1 backend receives in place of a native op; the twin engine runs the
# native op instead (native_equivalent in flagos-core's csrc/engines/twin/conv_layout.h), whose
# composite kernel reaches the twin's own (cudnn, mkldnn). Served wherever a twin is.
_NATIVE_EQUIVALENTS = {
    "aten::convolution_overrideable": "aten::convolution",
    "aten::convolution_backward_overrideable": "aten::convolution_backward",
}


# An op with one of these kernels runs on every device, the twin included. Such ops reach
# flagos as themselves only once a provider asks for it (a kernel library serving them,
# flagos.provider_api.route_ops_as_themselves); the twin then still serves them.
_COMPOSITES = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


@functools.cache
def _has_own_kernel(op: str, key: str) -> bool:
    """A kernel of the twin's own for ``op`` (or a native equivalent of a hook)."""
    if op in _NATIVE_EQUIVALENTS:
        return True
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)
    except RuntimeError:  # not an operator this torch knows
        return False


@functools.cache
def _has_twin_kernel(op: str, key: str) -> bool:
    """Whether the twin can run ``op``: a kernel of its own, or a composite one."""
    if _has_own_kernel(op, key):
        return True
    try:
        return any(torch._C._dispatch_has_kernel_for_dispatch_key(op, k) for k in _COMPOSITES)
    except RuntimeError:
        return False


class BoxingProvider(Provider):
    """The ``boxing`` provider: serves every op that has a kernel on the twin device of the
    device's HAL; HALs with opaque memory (no twin) are not served."""

    name = "boxing"
    is_cpp = True

    def serves(self, op: str) -> bool:
        """True when some loaded HAL's twin device has a kernel for ``op``."""
        return any(_has_twin_kernel(op, key) for key in set(_TWIN_KEYS.values()))

    def unavailable_on(self, hal: str | None) -> str | None:
        """Why boxing cannot run on ``hal``'s devices: they have no twin device (their
        memory is opaque, or ``FLAGOS_NO_TWIN=1``)."""
        if hal is None or _twin_key_of_hal(hal) is not None:
            return None
        return (f"not available on HAL {hal!r}: its devices have no twin device (opaque "
                "memory, or FLAGOS_NO_TWIN=1)")

    def serves_on(self, op: str, hal: str) -> bool:
        """True when the twin device of ``hal`` has a kernel for ``op``."""
        key = _twin_key_of_hal(hal)
        return key is not None and _has_twin_kernel(op, key)


def coverage(hal: str = "sim") -> list[str]:
    """The op overloads (``aten::add.Tensor``) the boxing provider serves on ``hal`` that
    reach the flagos dispatcher (ops with a flagos kernel of their own are not counted)."""
    key = _twin_key_of_hal(hal)
    if key is None:
        return []
    from flagos.provider_api import routed_kernel_ops

    routed_kernels = set(routed_kernel_ops())  # flagos kernels that still route the op
    out = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not _has_own_kernel(name, key):
            continue
        if (torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
                and name not in routed_kernels):
            continue  # a runtime kernel (empty, copy, views) or a composite: not routed
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"):
            continue
        out.append(name)
    return sorted(out)


def provider() -> BoxingProvider:
    """Entry point of group ``flagos.ops``: registers the C++ side with the flagos core."""
    from flagos.provider_api import register_engine_provider

    register_engine_provider("boxing", "twin")
    return BoxingProvider()
