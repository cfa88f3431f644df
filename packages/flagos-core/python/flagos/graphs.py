"""Graph capture and replay on flagos streams: ``torch.flagos.Graph``, ``torch.flagos.graph``
and ``torch.flagos.make_graphed_callables``, as ``torch.cuda.CUDAGraph``,
``torch.cuda.graph`` and ``torch.cuda.make_graphed_callables`` are for CUDA.

A graph records the work one flagos stream is given (kernels, copies, memsets) through the
HAL's stream capture and queues all of it again with one call. Its tensors come from a
private memory pool that stays reserved while the graph lives, so a replay reads and writes
the same memory: copy new inputs into the captured input tensors, replay, read the captured
outputs. Work that cannot be recorded on a stream (the CPU fallback, the host reading
device memory, a provider that is not capture-safe) raises during the capture.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils import _pytree

from flagos import _C

__all__ = ["Graph", "graph", "graph_pool_handle", "is_current_stream_capturing",
           "make_graphed_callables"]

CaptureErrorMode = Literal["default", "global", "thread_local", "relaxed"]
PoolHandle = tuple[int, int]


def graph_pool_handle() -> PoolHandle:
    """An id for a memory pool that several graphs may share (pass it as ``pool``)."""
    return tuple(_C._graph_pool_handle())


def is_current_stream_capturing() -> bool:
    """Whether the current flagos stream of the current device is capturing a graph."""
    return bool(_C._is_current_stream_capturing(torch.flagos.current_device()))


class Graph(_C._StreamGraph):
    """A captured graph of one flagos stream's work, replayed with :meth:`replay`.

    ``keep_graph=True`` keeps the capture after :meth:`capture_end`; it is instantiated by
    :meth:`instantiate` or the first :meth:`replay`. Most code uses :class:`graph` or
    :func:`make_graphed_callables` rather than calling :meth:`capture_begin` itself.
    """

    def __init__(self, keep_graph: bool = False) -> None:
        super().__init__(keep_graph)

    def capture_begin(self, pool: PoolHandle | None = None,
                      capture_error_mode: CaptureErrorMode = "global") -> None:
        """Start recording the current stream (a stream you created, not the default
        stream). ``pool``: share another graph's memory pool (:meth:`pool`,
        :func:`graph_pool_handle`). Every mode checks the capturing stream only."""
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self) -> None:
        """Stop recording; without ``keep_graph`` the graph is instantiated now."""
        super().capture_end()

    def instantiate(self) -> None:
        """Make the capture launchable (done by :meth:`capture_end` or the first replay)."""
        super().instantiate()

    def replay(self) -> None:
        """Queue the recorded work on the current stream of the graph's device."""
        super().replay()

    def reset(self) -> None:
        """Drop the capture and its replay; its pool is freed with its last graph."""
        super().reset()

    def pool(self) -> PoolHandle:
        """The id of this graph's memory pool, to share with another graph."""
        return tuple(super().pool())

    def enable_debug_mode(self) -> None:
        """Keep the capture after instantiation, for :meth:`debug_dump`."""
        super().enable_debug_mode()

    def debug_dump(self, debug_path: str) -> None:
        """Write what flagos knows of the graph (device, HAL, pool) to ``debug_path``; the
        HAL ABI has no way to list a capture's work items."""
        super().debug_dump(debug_path)


class _TwinCudaPools:
    """The CUDA twin's side of a graph's memory (boxing): kernels of PyTorch's CUDA twin
    take their temporaries from PyTorch's CUDA allocator, so while a flagos graph captures,
    that allocator serves the twin device from a graph pool of its own (the pools
    ``torch.cuda.graph`` uses), one per flagos pool and held as long as it: a temporary
    freed during the capture then never serves another tensor while the graph may replay.
    All of the twin device's allocations go there during the capture, the autograd
    thread's included, as the capture may record any of them."""

    def __init__(self) -> None:
        self._pools: dict[tuple[int, tuple[int, int]], _TwinCudaPool] = {}

    @staticmethod
    def _twin(device: int) -> int | None:
        if _C._twin_device(device) != "cuda":
            return None
        return int(_C._device_properties(device)["native_device_index"])

    # PyTorch's allocator records to a pool for one capture at a time (a second
    # beginAllocateToPool of it fails), while flagos captures on several streams may share
    # a pool: the twin's recording starts with the first of them and ends with the last.
    def begin_allocate(self, device: int, pool: tuple[int, int]) -> None:
        index = self._twin(device)
        if index is None:
            return
        entry = self._pools.get((device, pool))
        if entry is None:
            entry = self._pools[(device, pool)] = _TwinCudaPool(torch.cuda.graph_pool_handle())
        if entry.capturing == 0:
            torch._C._cuda_beginAllocateToPool(index, entry.handle)
            entry.references += 1
        entry.capturing += 1
        entry.users += 1

    def end_allocate(self, device: int, pool: tuple[int, int]) -> None:
        entry = self._pools.get((device, pool))
        if entry is None or entry.capturing == 0:
            return
        entry.capturing -= 1
        if entry.capturing == 0:
            torch._C._cuda_endAllocateToPool(self._twin(device), entry.handle)

    def release(self, device: int, pool: tuple[int, int]) -> None:
        entry = self._pools.get((device, pool))
        if entry is None:
            return
        entry.users -= 1
        if entry.users > 0:
            return
        del self._pools[(device, pool)]
        for _ in range(entry.references):
            torch._C._cuda_releasePool(self._twin(device), entry.handle)


@dataclass
class _TwinCudaPool:
    """One flagos pool's graph pool in PyTorch's CUDA allocator."""

    handle: tuple[int, int]
    users: int = 0  # the flagos graphs (and captures under way) that hold it
    capturing: int = 0  # captures under way into it
    references: int = 0  # beginAllocateToPool calls, each a reference releasePool returns


_twin_cuda_pools = _TwinCudaPools()
_C._set_twin_allocator_hooks(_twin_cuda_pools.begin_allocate, _twin_cuda_pools.end_allocate,
                             _twin_cuda_pools.release)

_capture_streams: dict[int, torch.Stream] = {}


def _default_capture_stream() -> torch.Stream:
    """The side stream captures use by default on the current device (one per device)."""
    device = torch.flagos.current_device()
    if device not in _capture_streams:
        _capture_streams[device] = torch.flagos.Stream(device)
    return _capture_streams[device]


class graph:
    """Context manager that captures the block's flagos work into ``flagos_graph``.

    As ``torch.cuda.graph``: the device is synchronized and the allocator's cache emptied
    first; the block runs on ``stream`` (default: a side stream of the current device,
    shared by all captures on it); ``pool`` shares another graph's memory. If the block
    raises, the partial capture is dropped and the graph can capture again.
    """

    def __init__(self, flagos_graph: Graph, pool: PoolHandle | None = None,
                 stream: torch.Stream | None = None,
                 capture_error_mode: CaptureErrorMode = "global") -> None:
        if stream is None:
            stream = _default_capture_stream()
        self.flagos_graph = flagos_graph
        self.pool = pool
        self.capture_stream = stream
        self.stream_ctx = torch.flagos.stream(stream)
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        torch.flagos.synchronize()
        gc.collect()
        torch.flagos.empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.flagos_graph.capture_begin(self.pool, self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type: object, *rest: object) -> None:
        try:
            if exc_type is None:
                self.flagos_graph.capture_end()
            else:
                self.flagos_graph.reset()  # the partial capture must never be replayed
        finally:
            self.stream_ctx.__exit__(None, None, None)


def _module_params(c: Callable) -> tuple[torch.Tensor, ...]:
    return tuple(c.parameters()) if isinstance(c, torch.nn.Module) else ()


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False,
                           pool: PoolHandle | None = None) -> Any:
    """Graphed versions of ``callables`` (a callable or ``nn.Module``, or a tuple of them):
    each one's forward and backward are captured once and replayed on every call, as
    ``torch.cuda.make_graphed_callables`` does.

    ``sample_args`` holds each callable's sample positional arguments (tensors; a tuple,
    or a tuple of tuples for several callables). Calls must pass arguments of the same
    shapes, dtypes and ``requires_grad``. Callables are warmed up ``num_warmup_iters``
    times on a side stream, then captured in order (backwards in reverse order) into one
    shared pool, so call them in that order. A module's hooks are not supported, and its
    parameters are captured as they are (keep ``requires_grad`` as it was).
    """
    if torch.is_autocast_enabled() and torch.is_autocast_cache_enabled():
        raise RuntimeError("flagos: make_graphed_callables does not support the autocast "
                           "cache; use torch.autocast(..., cache_enabled=False)")
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    flat_sample_args = []
    for c, args in zip(callables, sample_args, strict=True):
        if isinstance(c, torch.nn.Module):
            if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks:
                raise RuntimeError("flagos: modules with hooks cannot be graphed")
            if not all(b.requires_grad is False for b in c.buffers()):
                raise RuntimeError("flagos: module buffers that require grad cannot be graphed")
        flat, _ = _pytree.tree_flatten(args)
        if not all(isinstance(a, torch.Tensor) for a in flat):
            raise TypeError("flagos: make_graphed_callables takes only tensor arguments")
        flat_sample_args.append(tuple(flat))

    per_callable_static_inputs = [args + _module_params(c)
                                  for c, args in zip(callables, flat_sample_args, strict=True)]
    graph_pool = graph_pool_handle() if pool is None else pool
    fwd_graphs = [Graph() for _ in callables]
    bwd_graphs = [Graph() for _ in callables]

    def grad_inputs_of(static_inputs):
        return tuple(i for i in static_inputs if i.requires_grad)

    # Warm-up on the capture stream, away from the default stream: autotuning, lazy
    # initialization and autograd's accumulation nodes happen here, on the stream the
    # capture then records (a node of another stream would join it by events).
    torch.flagos.synchronize()
    with torch.flagos.stream(_default_capture_stream()):
        for func, args, static_inputs in zip(callables, sample_args, per_callable_static_inputs,
                                             strict=True):
            for _ in range(num_warmup_iters):
                outputs = _pytree.tree_leaves(func(*args))
                needs_grad = tuple(o for o in outputs if o.requires_grad)
                wanted = grad_inputs_of(static_inputs)
                if needs_grad and wanted:
                    torch.autograd.grad(needs_grad, wanted,
                                        grad_outputs=tuple(torch.empty_like(o) for o in needs_grad),
                                        only_inputs=True, allow_unused=allow_unused_input)
            del outputs
    torch.flagos.synchronize()

    per_callable_static_outputs = []
    per_callable_output_spec = []
    for func, args, fwd_graph in zip(callables, sample_args, fwd_graphs, strict=True):
        with graph(fwd_graph, pool=graph_pool):
            outputs = func(*args)
        flat_outputs, spec = _pytree.tree_flatten(outputs)
        per_callable_static_outputs.append(tuple(flat_outputs))
        per_callable_output_spec.append(spec)

    per_callable_static_grad_outputs = [None] * len(callables)
    per_callable_static_grad_inputs = [None] * len(callables)
    for i in reversed(range(len(callables))):
        static_outputs = per_callable_static_outputs[i]
        static_grad_outputs = tuple(torch.empty_like(o) if o.requires_grad else None
                                    for o in static_outputs)
        wanted = grad_inputs_of(per_callable_static_inputs[i])
        outputs_needing_grad = tuple(o for o in static_outputs if o.requires_grad)
        with graph(bwd_graphs[i], pool=graph_pool):
            grads = torch.autograd.grad(
                outputs_needing_grad, wanted,
                grad_outputs=tuple(g for g in static_grad_outputs if g is not None),
                only_inputs=True, allow_unused=allow_unused_input,
            ) if outputs_needing_grad and wanted else ()
        grads = iter(grads)
        static_grad_inputs = tuple(next(grads) if a.requires_grad else None
                                   for a in per_callable_static_inputs[i])
        per_callable_static_grad_outputs[i] = static_grad_outputs
        per_callable_static_grad_inputs[i] = static_grad_inputs

    def make_graphed_function(fwd_graph, bwd_graph, module_params, n_user_args, output_spec,
                              static_inputs, static_outputs, static_grad_outputs,
                              static_grad_inputs):
        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
                for i in range(n_user_args):
                    if static_inputs[i].data_ptr() != inputs[i].data_ptr():
                        static_inputs[i].copy_(inputs[i])
                fwd_graph.replay()
                return tuple(o.detach() for o in static_outputs)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
                for g, grad in zip(static_grad_outputs, grads, strict=True):
                    if g is not None and g.data_ptr() != grad.data_ptr():
                        g.copy_(grad)
                bwd_graph.replay()
                return tuple(b.detach() if b is not None else None for b in static_grad_inputs)

        def functionalized(*user_args: Any) -> Any:
            flat, _ = _pytree.tree_flatten(user_args)
            out = Graphed.apply(*(tuple(flat) + module_params))
            return _pytree.tree_unflatten(out, output_spec)

        return functionalized

    results = []
    for i, func in enumerate(callables):
        graphed = make_graphed_function(
            fwd_graphs[i], bwd_graphs[i], _module_params(func), len(flat_sample_args[i]),
            per_callable_output_spec[i], per_callable_static_inputs[i],
            per_callable_static_outputs[i], per_callable_static_grad_outputs[i],
            per_callable_static_grad_inputs[i])
        if isinstance(func, torch.nn.Module):
            def make_forward(func: torch.nn.Module, graph_training_state: bool, graphed: Callable,
                             orig_fwd: Callable) -> Callable:
                def new_fwd(*user_args: Any, **user_kwargs: Any) -> Any:
                    # The graph was captured in one training mode; the other runs eagerly.
                    if func.training == graph_training_state:
                        return graphed(*user_args, **user_kwargs)
                    return orig_fwd(*user_args, **user_kwargs)
                return new_fwd

            func.forward = make_forward(func, func.training, graphed, func.forward)
            results.append(func)
        else:
            results.append(graphed)
    return results[0] if just_one else tuple(results)
