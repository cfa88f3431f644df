"""flagos.routing: the per-op routing table of the flagos device.

Every ATen op on a flagos tensor is served by the first provider of its chain that accepts
the call; the chain comes from the routing table (shipped defaults, files, environment and
run-time changes). See docs/routing.md.

Public API::

    set(spec)             route ops from now on ("aten::mm=cpu;..." or a dict)
    override(spec)        the same inside a with-block, restored on exit
    load(path)            load a routing TOML file
    reset()               back to shipped defaults + environment
    resolve(op, device)   the provider chain for an op on a device
    explain(op)           which provider serves an op on each device, and why
    stats(), reset_stats()
    shadow.enable(ops), shadow.disable()   shadow verification (flagos.routing.shadow)
    cpu_dtype_gaps()      ops whose CPU kernel lacks a dtype, computed in a wider one
    providers(), register_provider(p), Provider
    set_backend(b)        connect the C++ core (implements Backend)
"""

from __future__ import annotations

from . import shadow
from .backend import Backend, NullBackend, Resolver
from .config import RoutingConfigError, Rule
from .cpu_dtype_gaps import cpu_dtype_gaps
from .explain import (
                      DeviceRoute,
                      Explanation,
                      OpExplanation,
                      UnknownOpError,
                      explain,
                      reset_stats,
                      stats,
)
from .providers import WELL_KNOWN_PROVIDERS, CpuProvider, Provider
from .table import (
                      Decision,
                      RouteOverride,
                      Step,
                      load,
                      override,
                      providers,
                      register_provider,
                      reset,
                      resolve,
                      rules,
                      set_backend,
                      version,
)
from .table import set_routes as set  # the public name is flagos.routing.set

__all__ = [
                      "WELL_KNOWN_PROVIDERS",
                      "Backend",
                      "CpuProvider",
                      "Decision",
                      "DeviceRoute",
                      "Explanation",
                      "NullBackend",
                      "OpExplanation",
                      "Provider",
                      "Resolver",
                      "RouteOverride",
                      "RoutingConfigError",
                      "Rule",
                      "Step",
                      "UnknownOpError",
                      "cpu_dtype_gaps",
                      "explain",
                      "load",
                      "override",
                      "providers",
                      "register_provider",
                      "reset",
                      "reset_stats",
                      "resolve",
                      "rules",
                      "set",
                      "set_backend",
                      "shadow",
                      "stats",
                      "version",
]
