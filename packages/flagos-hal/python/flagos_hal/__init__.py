"""flagos-hal: the C ABI a chip vendor implements, its loader, the reference HALs
(``sim``, ``cuda``), the conformance suite and the new-vendor scaffold.

    import flagos_hal
    hal = flagos_hal.load("sim")          # or a library path
    ptr = hal.malloc(0, 1024)
    specs = flagos_hal.discover()         # which HALs this process should use (FLAGOS_HAL)
"""

from flagos_hal._bundled import get_include, library_path
from flagos_hal.binding import (
    ABI_VERSION,
    EVENT_BLOCKING_SYNC,
    EVENT_DEFAULT,
    EVENT_DISABLE_TIMING,
    Hal,
    HalAbiError,
    HalError,
    KernelTarget,
    MemcpyKind,
    NativeDevice,
    PointerAttributes,
    PointerType,
    Status,
    load,
)
from flagos_hal.discovery import HalSpec, available, discover, resolve

__version__ = "0.1.0"

__all__ = [
    "ABI_VERSION",
    "EVENT_BLOCKING_SYNC",
    "EVENT_DEFAULT",
    "EVENT_DISABLE_TIMING",
    "Hal",
    "HalAbiError",
    "HalError",
    "HalSpec",
    "KernelTarget",
    "MemcpyKind",
    "NativeDevice",
    "PointerAttributes",
    "PointerType",
    "Status",
    "available",
    "discover",
    "get_include",
    "library_path",
    "load",
    "resolve",
]
