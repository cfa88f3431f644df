"""flagos-compile: ``torch.compile`` for the flagos device.

``flagos_compile.register()`` (called at ``import flagos`` through the ``flagos.plugins``
entry point, or by importing this package) teaches Dynamo and Inductor about ``flagos``:

- Dynamo: a DeviceInterface for ``flagos`` (streams, events, device properties);
- Inductor: the code generator of the HAL's twin (C++/OpenMP kernels for sim, Triton for
  CUDA-addressable HALs), a Python wrapper that allocates with the flagos allocator, and
  the device op overrides of the generated code;
- a Dynamo backend named ``"flagos"`` (``torch.compile(model, backend="flagos")``).

See docs/compile.md.
"""

from __future__ import annotations

import threading

__version__ = "0.1.0"
__all__ = ["__version__", "is_registered", "register"]

_lock = threading.RLock()
_registered = False
_registering = False


def register() -> None:
    """Register flagos with Dynamo and Inductor (idempotent, thread-safe)."""
    global _registered, _registering
    with _lock:
        if _registered or _registering:
            # _registering: re-entered from the imports below (torch autoloads flagos,
            # which calls its plugins); the outer call finishes the job.
            return
        _registering = True
        try:
            import torch

            if not hasattr(torch, "flagos"):
                import flagos  # noqa: F401 - brings up the device and torch.flagos

            from flagos_compile import _register

            _register.register_all()
            _registered = True
        finally:
            _registering = False


def is_registered() -> bool:
    """True once register() has run in this process."""
    return _registered


register()
