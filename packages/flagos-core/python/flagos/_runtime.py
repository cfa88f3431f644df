"""Process-wide bring-up: load HALs, rename PrivateUse1 and register torch.flagos."""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_done = False


def init() -> None:
    """Load the HALs and register the flagos device with torch (idempotent)."""
    global _done
    with _lock:
        if _done:
            return
        import flagos_hal

        try:
            from flagos import _C
        except ImportError as e:
            from flagos._torch_support import explain_import_failure

            raise ImportError(explain_import_failure(e, torch.__version__)) from e

        specs = flagos_hal.discover()
        if not _C._hals_initialized():
            _C._init_hals([s.path for s in specs])
        if torch._C._get_privateuse1_backend_name() != "flagos":
            torch.utils.rename_privateuse1_backend("flagos")
        from flagos import api

        torch._register_device_module("flagos", api)
        _C._register_graph_impl()  # torch.accelerator.Graph, where torch has the interface
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
        _done = True
