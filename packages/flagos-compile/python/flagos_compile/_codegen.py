"""Inductor code generation for the flagos device.

Generated code follows the HAL's native twin:

- sim (host memory): CppScheduling writes C++/OpenMP kernels, exactly the kernels Inductor
  writes for "cpu". They take raw data pointers, so the Python wrapper hands them the
  flagos tensors themselves (``data_ptr()`` is a host address): no copies. Before a host
  kernel touches flagos memory the wrapper waits for the device (copies and fills on a
  flagos stream are asynchronous on sim).
- CUDA-addressable HALs: TritonScheduling writes Triton kernels, launched on the native
  handle of the current flagos stream (a cudaStream_t).

Buffers are allocated by the wrapper with ``empty_strided_flagos(sizes, strides, dtype, N)``
(flagos.provider_api.empty_strided): the flagos caching allocator, in one C++ call, as
``empty_strided_cuda`` is for CUDA; the device guard and the raw stream of kernel launches
are single C++ calls too (flagos.provider_api.CompiledDeviceGuard, current_raw_stream). Ops
Inductor does not generate code for (extern kernels, fallbacks) are plain ATen calls on
flagos tensors and go through the flagos routing dispatcher.
"""

from __future__ import annotations

import warnings
from textwrap import dedent
from typing import Any

import torch
from torch._inductor import config
from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.wrapper import (
    PythonWrapperCodegen,
    SubgraphPythonWrapperCodegen,
)
from torch._inductor.virtualized import V

from flagos_compile._twin import twin_of, twins

SYNC_HELPER = "flagos_host_sync"
EMPTY_STRIDED = "empty_strided_flagos"
DEVICE_GUARD = "flagos_device_guard"


def scheduling_class() -> type:
    """The Inductor scheduling of flagos kernels: C++ for a CPU twin, Triton for CUDA.

    Inductor wants a class (it asks ``issubclass(..., TritonScheduling)``), and one per
    device type, so the twin of the process's flagos devices picks it.
    """
    ts = twins()
    if ts == {"cuda"}:
        from torch._inductor.codegen.triton import TritonScheduling

        return TritonScheduling
    if ts <= {"cpu"}:
        from torch._inductor.codegen.cpp import CppScheduling

        return CppScheduling
    from torch._inductor.scheduler import BaseScheduling

    if "none" in ts:
        why = ("flagos_compile: Inductor generates kernels for a flagos device's twin (C++ for "
               "the CPU, Triton for CUDA), and flagos devices of this process have none (opaque "
               "memory, or FLAGOS_NO_TWIN=1): only ops routed to a kernel provider compile, "
               "and this graph has others. Run it eager, or whole-graph with "
               "backend='flagos_offload' on a HAL with a graph runtime")
    else:
        why = (f"flagos_compile: the flagos devices of this process have different native "
               f"twins ({sorted(ts)}); Inductor picks one code generator per device type, "
               f"so load HALs of one kind (FLAGOS_HAL) to use torch.compile on flagos")

    class MixedTwinsScheduling(BaseScheduling):
        def __init__(self, scheduler: Any) -> None:
            raise RuntimeError(why)

    return MixedTwinsScheduling


_warned_cudagraphs = False


def warn_no_cudagraphs() -> None:
    """mode="reduce-overhead" on flagos: say once that it runs without CUDA graphs."""
    global _warned_cudagraphs
    if _warned_cudagraphs:
        return
    _warned_cudagraphs = True
    hals = sorted({twin_of(i) for i in range(torch.flagos.device_count())})
    warnings.warn(
        "flagos: mode='reduce-overhead' asks for CUDA graphs, which flagos does not capture "
        f"(device twin: {', '.join(hals)}; graphs are a CUDA feature and the sim HAL runs on "
        "the host). The compiled code runs without graphs: same results, no graph replay.",
        RuntimeWarning, stacklevel=2)


class _FlagosWrapperMixin:
    """What the Python wrapper does differently for flagos: host kernels on sim, buffers
    on the graph's own flagos device, a clear word when CUDA graphs were asked for."""

    def write_header(self) -> None:
        super().write_header()  # type: ignore[misc]
        self.imports.writeline(  # type: ignore[attr-defined]
            f"from flagos.provider_api import empty_strided as {EMPTY_STRIDED}, "
            f"CompiledDeviceGuard as {DEVICE_GUARD}")
        if config.triton.cudagraphs:
            # Said when the module loads, so that an FX-graph-cache hit says it too.
            self.imports.writeline(  # type: ignore[attr-defined]
                "from flagos_compile._codegen import warn_no_cudagraphs")
            self.imports.writeline("warn_no_cudagraphs()")  # type: ignore[attr-defined]

    def make_allocation(self, name: str, device: Any, dtype: Any, shape: Any, stride: Any,
                        allocation_shape: Any = None, is_pinned: bool = False) -> str:
        if device.type != "flagos" or config.test_configs.track_memory_lifecycle:
            return super().make_allocation(  # type: ignore[misc]
                name, device, dtype, shape, stride, allocation_shape, is_pinned)
        # Inductor writes device='flagos' (no index) for devices without a device guard;
        # the index keeps buffers of a graph on flagos:1 on flagos:1.
        index = device.index if device.index is not None else 0
        shape_s = self.codegen_python_shape_tuple(shape)  # type: ignore[attr-defined]
        alloc_s = self.codegen_python_shape_tuple(  # type: ignore[attr-defined]
            shape if allocation_shape is None else allocation_shape)
        stride_s = self.codegen_python_shape_tuple(stride)  # type: ignore[attr-defined]
        out = f"{name} = {EMPTY_STRIDED}({alloc_s}, {stride_s}, {dtype}, {index})"
        if alloc_s != shape_s:
            out += f".as_strided({shape_s}, {stride_s})"
        return out

    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *,
                                     device: Any = None, triton: bool = True,
                                     **kwargs: Any) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == "flagos":
            # A C++ kernel on a host-memory device: wait for the current stream's queued
            # copies and fills (a C++ call that returns at once when it is idle), then
            # call it with the flagos tensors (their data_ptr()s).
            self.write_flagos_sync_header_once()
            index = device.index if device.index is not None else 0
            self.writeline(f"{SYNC_HELPER}({index})")
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(  # type: ignore[misc]
            kernel_name, call_args, device=device, triton=triton, **kwargs)

    def write_flagos_sync_header_once(self) -> None:
        line = f"from flagos.provider_api import sync_for_host_access as {SYNC_HELPER}"
        root = self
        while isinstance(root, SubgraphPythonWrapperCodegen):
            root = root.parent_wrapper
        if not root.imports.contains(line):
            root.imports.writeline(line)


class FlagosSubgraphWrapperCodegen(_FlagosWrapperMixin, SubgraphPythonWrapperCodegen):
    """The wrapper of a subgraph (control flow, graph partitions) on flagos."""


class FlagosWrapperCodegen(_FlagosWrapperMixin, PythonWrapperCodegen):
    """The Python wrapper of a graph whose kernels run on flagos."""

    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None,
               parent_wrapper: PythonWrapperCodegen | None,
               partition_signatures: Any = None) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return FlagosSubgraphWrapperCodegen(subgraph_name, parent_wrapper,
                                                partition_signatures)
        return FlagosWrapperCodegen()


class FlagosDeviceOpOverrides(DeviceOpOverrides):
    """The device calls the Python wrapper writes: torch.flagos instead of torch.cuda."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from flagos.provider_api import current_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.flagos.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.flagos.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        # Inductor writes `with {device_guard}:`. A Triton kernel of a CUDA-twin device
        # needs its twin current too (the kernel module is loaded onto the current CUDA
        # device and launched there): the guard makes both current.
        return f"{DEVICE_GUARD}({device_idx})"

    def current_stream(self) -> str:
        return "torch.flagos.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"

    def kernel_driver(self) -> str:
        return dedent("")
