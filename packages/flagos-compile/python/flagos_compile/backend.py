"""The ``flagos`` Dynamo backend: Inductor that respects the flagos routing table.

``torch.compile(model, backend="flagos")`` compiles with Inductor, with one difference
from the default backend: an ATen op whose route on the graph's flagos device starts with
a kernel provider (``native``, ``gems``, a vendor's own provider; anything but the twin
providers ``boxing`` and ``cpu``) is kept out of Inductor's code generation. It is neither
decomposed nor fused; the compiled code calls it as an ATen op, so the flagos dispatcher
runs it with the provider the routing table names (and that provider may still decline a
call: the chain goes on as in eager). Ops routed to the twin are compiled by Inductor
exactly as with the default backend, since generated code is what the twin would run,
minus the per-op dispatch.

The routing table is read when a graph is compiled: a later ``flagos.routing.set()`` does
not recompile graphs already compiled (``torch._dynamo.reset()`` does).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._ops import OpOverload

log = logging.getLogger(__name__)

TWIN_PROVIDERS = frozenset({"boxing", "cpu"})
"""Providers whose work Inductor's generated code replaces: the native twin's kernels."""

_NS = "flagos_routed"
_lib: torch.library.Library | None = None
_wrappers: dict[tuple[OpOverload, frozenset[str]], OpOverload] = {}


def _device_index(example_inputs: Sequence[Any]) -> int | None:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "flagos":
            return x.device.index if x.device.index is not None else 0
    return None


def routed_head(op: OpOverload, device_index: int) -> str:
    """The first provider of ``op``'s route on flagos:device_index."""
    import flagos.routing

    chain = flagos.routing.resolve(op.name(), device_index)
    return chain[0] if chain else "cpu"


def kernel_routed(op: OpOverload, device_index: int) -> bool:
    """Whether the routing table sends ``op`` to a kernel provider rather than the twin."""
    try:
        return routed_head(op, device_index) not in TWIN_PROVIDERS
    except Exception:  # noqa: BLE001 - an op the table cannot name stays with Inductor
        return False


def _functional(op: OpOverload) -> bool:
    s = op._schema
    return not s.is_mutable and all(a.alias_info is None for a in (*s.arguments, *s.returns))


def routed_op(op: OpOverload, scalars: frozenset[str] = frozenset()) -> OpOverload:
    """An opaque twin of ``op`` (same schema, namespace ``flagos_routed``): Inductor has no
    lowering for it and so calls it as a fallback, and it calls ``op`` itself, which the
    flagos dispatcher routes. ``scalars`` names the ``Tensor`` arguments that a call site
    passes a Python number (``x + 1.0``: ATen takes it, a custom op's ``Tensor`` would
    not): the twin declares them ``Scalar``."""
    global _lib
    key = (op, scalars)
    w = _wrappers.get(key)
    if w is not None:
        return w
    if _lib is None:
        _lib = torch.library.Library(_NS, "FRAGMENT")  # noqa: TOR901 - kept for the process
    base = op._schema.name.split("::", 1)[1]
    name = f"{base}__{op._overloadname}" if op._overloadname != "default" else base
    schema = str(op._schema).split("(", 1)[1]
    if scalars:
        name += "__scalar_" + "_".join(sorted(scalars))
        params, rest = schema.split(") ->", 1)
        for arg in sorted(scalars):
            params = re.sub(rf"\bTensor {re.escape(arg)}\b", f"Scalar {arg}", params)
        schema = params + ") ->" + rest
    _lib.define(f"{name}({schema}", tags=(torch.Tag.pt2_compliant_tag,))

    def call(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    _lib.impl(name, call, "CompositeExplicitAutograd")
    w = getattr(getattr(torch.ops, _NS), name).default
    _wrappers[key] = w
    return w


def _scalar_tensor_arguments(node: torch.fx.Node, op: OpOverload) -> frozenset[str]:
    """The ``Tensor`` arguments of ``op`` that this call passes a Python number."""
    found = []
    for i, arg in enumerate(op._schema.arguments):
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, (bool, int, float)) and isinstance(arg.type, torch.TensorType):
            found.append(arg.name)
    return frozenset(found)


def _route_graph(gm: torch.fx.GraphModule, device_index: int) -> list[str]:
    """Point every kernel-routed ATen call of ``gm`` at its opaque twin; returns the ops."""
    routed = []
    for node in gm.graph.nodes:
        t = node.target
        if (node.op == "call_function" and isinstance(t, OpOverload)
                and t.namespace in ("aten", "prims") and _functional(t)
                and kernel_routed(t, device_index)):
            node.target = routed_op(t, _scalar_tensor_arguments(node, t))
            routed.append(t.name())
    if routed:
        gm.recompile()
    return routed


def _decompositions(device_index: int) -> dict[Any, Callable[..., Any]]:
    """Inductor's decomposition table minus the ops the routing table sends to kernels."""
    from torch._inductor.decomposition import select_decomp_table

    table = select_decomp_table()
    return {op: fn for op, fn in table.items()
            if not (isinstance(op, OpOverload) and kernel_routed(op, device_index))}


def flagos_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                   mode: str | None = None, options: dict[str, Any] | None = None) -> Any:
    """The ``flagos`` Dynamo backend (see the module docstring)."""
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    from flagos_compile import register

    register()
    device_index = _device_index(example_inputs)
    patches = {**list_mode_options(mode or "default"), **(options or {})}
    if device_index is not None and patches.get("triton.cudagraphs"):
        from flagos_compile._codegen import warn_no_cudagraphs

        warn_no_cudagraphs()  # and compile without them, rather than let Inductor try
        patches["triton.cudagraphs"] = False
    if device_index is None:  # no flagos tensor in the graph: plain Inductor
        return compile_fx(gm, example_inputs, config_patches=patches)

    @functools.wraps(compile_fx_inner)
    def inner(graph: torch.fx.GraphModule, inputs: Sequence[Any], **kw: Any) -> Any:
        routed = _route_graph(graph, device_index)
        if routed:
            log.info("flagos backend: %d op call(s) left to the routing table: %s",
                     len(routed), sorted(set(routed)))
        return compile_fx_inner(graph, inputs, **kw)

    # The AOTAutograd cache key does not see the routing table (it would hand back a graph
    # compiled under other routes); Inductor's FX graph cache, keyed on the routed graph,
    # still applies.
    with torch._functorch.config.patch(enable_autograd_cache=False):
        return compile_fx(gm, example_inputs, inner_compile=inner, config_patches=patches,
                          decompositions=_decompositions(device_index))


def register_backend() -> None:
    """Make ``backend="flagos"`` known to torch.compile.

    Installed, flagos-compile declares the backend in torch's ``torch_dynamo_backends``
    entry points, and torch registers it itself when it first looks the name up (loading
    the entry point imports this package, which registers flagos: registering the name
    here as well would make torch's own registration fail as a duplicate). Only where
    torch does not know the name (the package on the path, not installed) is it
    registered here."""
    from torch._dynamo import list_backends
    from torch._dynamo.backends.registry import register_backend

    if "flagos" in list_backends(exclude_tags=()):
        return
    register_backend(flagos_backend, name="flagos")
