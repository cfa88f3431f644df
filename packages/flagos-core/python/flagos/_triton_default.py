"""Triton where none of its own backends has a device: flagos' HAL driver becomes Triton's.

On a chip without CUDA (and on sim) no Triton backend's driver is active, and Triton's
default driver is an error ("0 active drivers"). Once Triton is imported in a process with
flagos devices, flagos then makes its HAL driver (:class:`flagos.triton_driver.HalDriver`)
Triton's active driver: a ``@triton.jit`` kernel called with flagos tensors compiles for
the HAL's target and launches through the HAL, or fails naming the HAL when no Triton
backend compiles for it (sim). Where a backend of Triton's has its device (CUDA), Triton
keeps its own driver; the HAL driver is then made active by hand
(``with flagos.triton_driver.active():``), as in the no-twin mode on a GPU.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

log = logging.getLogger("flagos")


def _device_of_its_own(driver: type) -> bool:
    try:
        return bool(driver.is_active())
    except (ImportError, OSError, RuntimeError):  # a backend that cannot ask (no runtime)
        return False


def adopt(triton: ModuleType) -> None:
    """Make the HAL driver Triton's active driver where no backend of Triton's is active
    and nothing has set a driver."""
    import torch
    from triton.backends import backends

    config = triton.runtime.driver
    if getattr(config, "_active", None) is not None or torch.flagos.device_count() == 0:
        return
    if any(_device_of_its_own(b.driver) for b in backends.values()):
        return
    importing = sys.modules.get("flagos.triton_driver")
    if importing is not None and not hasattr(importing, "activate"):
        # flagos.triton_driver itself is importing Triton: it activates the HAL driver once
        # its body has run (activate() does not exist yet)
        importing.__dict__["_activate_when_loaded"] = True
        return
    from flagos import triton_driver

    triton_driver.activate()
    log.info("flagos: no Triton backend has a device here; Triton's driver is flagos' HAL "
             "driver")


def install() -> None:
    """Adopt Triton when (if ever) it is imported."""
    from flagos._after_import import after_import

    after_import("triton", adopt)
