"""The registrations themselves, all through torch's extension points."""

from __future__ import annotations

import inspect

import torch
from torch._dynamo.device_interface import register_interface_for_device
from torch._inductor.codegen.common import (
    get_device_op_overrides,
    register_backend_for_device,
    register_device_op_overrides,
)

from flagos_compile._codegen import FlagosDeviceOpOverrides, FlagosWrapperCodegen, scheduling_class
from flagos_compile._device import FlagosInterface


def register_all() -> None:
    """Dynamo device interface, Inductor backend and op overrides, the "flagos" backend."""
    from flagos_compile import _patches

    _patches.apply()
    register_interface_for_device("flagos", FlagosInterface)
    for i in range(torch.flagos.device_count()):
        register_interface_for_device(f"flagos:{i}", FlagosInterface)
    extra = {}
    if "device_custom_pass" in inspect.signature(register_backend_for_device).parameters:
        try:
            from flagos_compile._cache_key import FlagosCacheKeyPass
        except ImportError:  # a torch with device passes but another pass base class
            FlagosCacheKeyPass = None
        if FlagosCacheKeyPass is not None:
            extra["device_custom_pass"] = FlagosCacheKeyPass()  # flagos' build in the key
    register_backend_for_device("flagos", scheduling_class(), FlagosWrapperCodegen, **extra)
    # torch loads its own device op overrides (cuda, cpu, xpu, ...) on first lookup; up to
    # torch 2.12 only while the registry is empty, so registering flagos first left native
    # CUDA graphs with no device guard (`with pass:`). Look one up first.
    get_device_op_overrides("cpu")
    register_device_op_overrides("flagos", FlagosDeviceOpOverrides())
    from flagos_compile import backend

    backend.register_backend()
