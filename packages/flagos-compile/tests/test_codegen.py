"""The generated code really runs on flagos: C++ kernels on flagos tensors, buffers from
the flagos allocator on the graph's own device, no CPU detour."""

from __future__ import annotations

import re

import flagos_compile
import pytest
import torch
from conftest import assert_close
from torch._inductor.utils import run_and_get_code


def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w).sin() * 2 + x.sum(dim=1, keepdim=True)


def test_cpp_kernels_on_flagos_tensors(sim_twin) -> None:
    x = torch.randn(16, 16, device="flagos")
    w = torch.randn(16, 16, device="flagos")
    allocs = torch.flagos.memory_stats()["allocation.all.allocated"]
    out, (code, *_) = run_and_get_code(torch.compile(f), x, w)
    assert out.device == torch.device("flagos", 0)
    assert_close(out, f(x.cpu(), w.cpu()), rtol=1e-5, atol=1e-5)
    # Inductor wrote C++ kernels (CppScheduling) and called them with flagos buffers.
    assert "async_compile.cpp_pybinding" in code
    assert 'extern "C"' in code
    # buffers: one C++ call each into the flagos allocator, on the graph's device
    assert re.search(r"empty_strided_flagos\([^\n]*, 0\)", code)
    assert not re.search(r"= empty_strided\(.*device='flagos", code)
    assert "from flagos.provider_api import sync_for_host_access as flagos_host_sync" in code
    assert "flagos_host_sync(0)" in code
    assert "extern_kernels.mm" in code  # the matmul: an ATen call, routed by flagos
    assert "triton" not in code.lower().replace("triton_meta", "")
    assert ".cpu()" not in code and "device='cpu'" not in code
    assert torch.flagos.memory_stats()["allocation.all.allocated"] > allocs


def test_second_device_keeps_its_buffers() -> None:
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")
    x = torch.randn(8, 8, device="flagos:1")
    w = torch.randn(8, 8, device="flagos:1")
    out, (code, *_) = run_and_get_code(torch.compile(f), x, w)
    assert out.device == torch.device("flagos", 1)
    assert re.search(r"empty_strided_flagos\([^\n]*, 1\)", code)
    assert_close(out, f(x.cpu(), w.cpu()), rtol=1e-5, atol=1e-5)


def test_reduce_overhead_falls_back_with_a_warning() -> None:
    import flagos_compile._codegen as cg

    cg._warned_cudagraphs = False
    x = torch.randn(8, 8, device="flagos")
    w = torch.randn(8, 8, device="flagos")
    c = torch.compile(f, mode="reduce-overhead")
    with pytest.warns(RuntimeWarning, match="CUDA graphs"):
        out = c(x, w)
    for _ in range(2):
        out = c(x, w)
    assert out.device.type == "flagos"
    assert_close(out, f(x.cpu(), w.cpu()), rtol=1e-5, atol=1e-5)


def test_register_is_idempotent_and_patches_are_named() -> None:
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._inductor.codegen.common import get_wrapper_codegen_for_device

    flagos_compile.register()
    flagos_compile.register()
    assert flagos_compile.is_registered()
    assert get_interface_for_device("flagos").device_count() == torch.flagos.device_count()
    assert get_wrapper_codegen_for_device("flagos").__name__ == "FlagosWrapperCodegen"
    from flagos_compile import _patches

    assert len(_patches.applied) == len(set(_patches.applied))
    assert "torch._inductor.scheduler.BaseSchedulerNode.is_cpu" in _patches.applied


def test_wrapper_helpers_match_the_python_api() -> None:
    """The C++ calls the generated wrapper makes per buffer, guard and kernel launch."""
    from flagos import provider_api as api

    other = 1 if torch.flagos.device_count() > 1 else 0
    torch.flagos.set_device(0)
    t = api.empty_strided((2, 3), (1, 2), torch.float16, other)
    assert t.device == torch.device("flagos", other) and t.dtype == torch.float16
    assert t.shape == (2, 3) and t.stride() == (1, 2)
    assert torch.flagos.current_device() == 0  # allocated there, current device kept
    guard = api.CompiledDeviceGuard(other)
    with guard:
        assert torch.flagos.current_device() == other
        with pytest.raises(RuntimeError, match="entered twice"), guard:
            pass
    assert torch.flagos.current_device() == 0
    with pytest.raises(ValueError, match="inside"), api.CompiledDeviceGuard(other):
        raise ValueError("inside")  # not swallowed, and the device is restored
    assert torch.flagos.current_device() == 0
    s = torch.flagos.Stream(other)
    with torch.flagos.stream(s):
        assert api.current_raw_stream(other) == s.native_handle
    assert api.current_raw_stream(other) == torch.flagos.current_stream(other).native_handle
