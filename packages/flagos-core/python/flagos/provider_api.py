"""The provider API: everything a package that extends flagos (an op provider, a kernel
library, a compiler backend) uses of flagos-core, and nothing else of it.

Packages find flagos-core only through this module, the ``flagos.routing`` and
``torch.flagos`` APIs and entry points; core's private modules (``flagos._C``,
``flagos._routing_backend``, names with a leading underscore) may change in any release,
and ``nox -s lint`` refuses imports of them outside flagos-core. What is here changes
only with :data:`API_VERSION`: a new minor version adds names, a new major one may change
or remove them.

Registering providers (describe each with a :class:`flagos.routing.Provider` whose
``is_cpp`` is True):

- :func:`register_engine_provider`: a provider run by one of core's engines (the twin
  engine, the CPU fallback);
- :func:`register_foreign_provider`: a Python kernel library's kernels run by core's
  foreign-kernel engine (zero-copy aliases, stream, kernel scope, result adoption);
- :func:`register_external_provider`: a C++ engine in another shared library;
- :func:`route_ops_as_themselves`, :func:`results_in_flagos_memory`: how ops reach a
  provider and where its results are allocated.

Kernels: :class:`DefaultGeneratorLent` (the flagos generator lent to a twin kernel),
:func:`routed_kernel_ops`, :func:`twin_device`, :func:`twin_of_hal`, :func:`device_results`,
:func:`device_results_allowed`.

Routing and manifest files with ``file:line`` errors: :class:`KeyLocator`,
:class:`Where`, :func:`syntax_error`, :func:`type_name`.

Adapting libraries flagos does not depend on, only in processes that import them:
:func:`after_import`.

Kernels through the HAL's kernel extension (API 1.1): :class:`KernelModule`,
:class:`Kernel`, :class:`KernelTarget`, :func:`kernel_formats`, :func:`kernel_target`
(:mod:`flagos.kernels`), and :mod:`flagos.launch_cache` to relaunch them from C++.

Compiled code and graph runtimes: :func:`empty_strided`, :func:`sync_for_host_access`,
:func:`current_raw_stream`, :class:`CompiledDeviceGuard`, :class:`Graph`,
:func:`graph_formats`, :func:`hal_info`, :func:`device_properties`,
:func:`extension_path`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flagos import _C
from flagos._after_import import after_import
from flagos.kernels import Kernel, KernelModule, KernelTarget
from flagos.kernels import formats as kernel_formats
from flagos.kernels import target as kernel_target
from flagos.routing.config import KeyLocator, Where, syntax_error, type_name

__all__ = [
    "API_VERSION", "CompiledDeviceGuard", "DefaultGeneratorLent", "Graph", "Kernel", "KernelModule",
    "KernelTarget", "KeyLocator", "Where", "after_import", "current_raw_stream", "device_properties", "device_results",
    "device_results_allowed", "empty_strided", "extension_path", "graph_formats", "hal_info", "kernel_formats", "kernel_target",
    "register_engine_provider", "register_external_provider", "register_foreign_provider",
    "results_in_flagos_memory", "route_ops_as_themselves", "routed_kernel_ops",
    "set_replayable", "sync_for_host_access", "syntax_error", "twin_device", "twin_of_hal", "type_name",
]

API_VERSION: tuple[int, int] = (1, 2)
"""(major, minor) of this module's interface."""


# ---- registering providers ---------------------------------------------------------------

def register_engine_provider(name: str, engine: str) -> None:
    """Register a C++ provider ``name`` run by one of the core's engines: ``"twin"``
    (zero-copy on the HAL's native twin device) or ``"cpu"`` (the CPU fallback).
    Packages such as flagos-ops-boxing call this, then describe the provider (which ops,
    which HALs) with a :class:`flagos.routing.Provider` whose ``is_cpp`` is True."""
    _C._register_provider(name, engine)


def register_foreign_provider(name: str, resolve_kernel: Callable[[str], object]) -> None:
    """Register the C++ side of provider ``name`` as the core's foreign-kernel engine: the
    kernels of a Python kernel library (FlagGems' Triton kernels) run on flagos tensors
    through the same zero-copy twin aliases, stream, kernel scope and result mapping as
    ``boxing``. ``resolve_kernel(op_name)`` (``"aten::add.Tensor"``; ``"aten::abs"`` for a
    default overload) returns the library's function for the op, or ``None``; it is asked
    once per op, never per call. The function is called the way torch calls a Python kernel
    registered with ``torch.library`` (schema arguments on the twin device; trailing
    defaulted arguments left out) and returns the op's results on the twin, or
    ``NotImplemented`` to decline the call."""
    _C._register_provider(name, "foreign", resolve_kernel)


def set_replayable(name: str, ops: Iterable[str]) -> None:
    """Declare the ops (``"aten::add.Tensor"``) whose calls provider ``name`` lets flagos
    relaunch from C++ (:mod:`flagos.launch_cache`), replacing what it declared before: a
    Python provider (as its ``replayable_ops`` do at registration) or a kernel library's
    (:func:`register_foreign_provider`) on devices without a twin, where its kernels get
    flagos tensors and launch through the HAL. Each op's kernel must be a function of the
    arguments' metadata whose device work is its launches (wrap it in
    :func:`flagos.launch_cache.watched`, which spoils a recording that computes with ATen)."""
    _C._set_provider_replayable(name, sorted(ops))


def register_external_provider(name: str, engine: object) -> None:
    """Register a C++ provider ``name`` whose engine is in another shared library:
    ``engine`` is a PyCapsule named ``"flagos.provider_engine"`` holding a
    ``flagos_provider_engine_t`` (header ``flagos/include/flagos/provider_engine.h`` in
    flagos-core). The dispatcher then calls it without the GIL; it may decline a call."""
    _C._register_provider(name, "external", engine)


def route_ops_as_themselves(ops: Iterable[str]) -> list[str]:
    """Make structured functional and in-place ops (``aten::log``, ``aten::cos_``) and ops
    with a composite kernel (``aten::abs``, ``aten::_to_copy``) reach the flagos dispatcher
    as themselves rather than as their out= form or their decomposition, for providers that
    serve those forms. Ops that already arrive as themselves are skipped; returns the ops
    changed now. For every provider of those ops the call then arrives as the op itself
    (the twin and the CPU fallback serve every form)."""
    return list(_C._route_ops_as_themselves(list(ops)))


def results_in_flagos_memory(ops: Iterable[str]) -> None:
    """Declare that the twin-device kernels of these extension ops (``"ns::name"``, every
    overload) allocate only through tensor factories (``torch.empty``, ATen ops), never
    through ``Allocator::raw_allocate``. On a CUDA twin their results are then allocated in
    flagos memory while the kernel runs, as ATen ops' are, instead of being copied into it
    afterwards. ATen ops need no declaration; an undeclared extension op's results are
    copied."""
    _C._allow_device_results(list(ops))


# ---- kernels -----------------------------------------------------------------------------

DefaultGeneratorLent = _C._DefaultGeneratorLent
"""``with DefaultGeneratorLent(generator, twin_type, twin_index):`` a twin kernel that draws
from its device's default generator draws from the flagos generator ``generator`` instead
(its state advances as flagos' own kernels advance it)."""


def routed_kernel_ops() -> list[str]:
    """The ops that flagos-core registered a PrivateUse1 kernel for that still sends each
    call down its route (``"aten::mode.values"``, ...)."""
    return list(_C._routed_kernel_ops())


def twin_device(device: int = 0) -> str:
    """The twin device type of flagos:``device`` as core's engines see it (``"cpu"``,
    ``"cuda"``, ``"none"``: opaque memory)."""
    return _C._twin_device(device)


def twin_of_hal(hal: str) -> str | None:
    """The twin device type (``"cpu"``, ``"cuda"``) of the devices of HAL ``hal``; None
    when their memory is opaque (no twin, or ``FLAGOS_NO_TWIN=1``) or no device of
    that HAL is loaded here."""
    import torch

    for i in range(torch.flagos.device_count()):
        props = torch.flagos.get_device_properties(i)
        if props.hal == hal:
            return props.twin_device if props.twin_device not in ("", "none") else None
    return None


def device_results(device: int = 0) -> bool:
    """Whether flagos:``device``'s twin kernels allocate their results in flagos memory
    (installing what serves them as the first twin op would)."""
    return bool(_C._device_results(device))


def device_results_allowed(op: str) -> bool:
    """Whether results of extension op ``op`` (``"ns::name"``) may be allocated in flagos
    memory (see :func:`results_in_flagos_memory`)."""
    return bool(_C._device_results_allowed(op))


# ---- compiled code and graph runtimes ------------------------------------------------------

empty_strided = _C._empty_strided
"""``empty_strided(size, stride, dtype, device_index)``: a flagos tensor from the flagos
caching allocator in one C++ call (what generated code allocates with)."""

sync_for_host_access = _C._sync_for_host_access
"""``sync_for_host_access(device_index)``: waits for the work that host code (a compiled
C++ kernel on host-addressable memory) must see."""

current_raw_stream = _C._current_raw_stream
"""``current_raw_stream(device_index)``: the native handle of the current flagos stream
(a ``cudaStream_t`` on the cuda HAL)."""

CompiledDeviceGuard = _C._CompiledDeviceGuard
"""``with CompiledDeviceGuard(device_index):`` flagos:``device_index`` (and its twin) current
for generated code, in one C++ call."""

Graph = _C._Graph
"""``Graph(device_index, format, artifact)``: a compiled graph loaded into a HAL's graph
runtime (docs/hal/graph.md); ``inputs``, ``outputs``, ``workspace_size``, ``execute``."""


def graph_formats(device: int = 0) -> list[str]:
    """The artifact formats flagos:``device``'s graph runtime loads (``[]``: none)."""
    return list(_C._graph_formats(device))


def hal_info() -> list[dict]:
    """One entry per loaded HAL library: name, path, version, ABI version, devices."""
    return list(_C._hal_info())


def device_properties(device: int = 0) -> dict:
    """flagos:``device``'s properties as a dict (``hal``, ``hal_path``, ...)."""
    return dict(_C._device_properties(device))


def extension_path() -> str:
    """The path of flagos-core's compiled extension (a cache key of code that depends on
    how its engines lay results out)."""
    return _C.__file__
