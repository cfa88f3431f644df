"""The pieces of the Triton path (flagos on a CUDA HAL) that run without a GPU.

The sim HAL's twin is the CPU; these tests pretend flagos:0's twin is cuda:1 (an H200:
compute capability 9.0, 132 SMs) by replacing the twin lookup and the CUDA device
properties, and check what Inductor would write into a Triton kernel and its wrapper.
Nothing here compiles or launches a Triton kernel: that is unverified without a GPU.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from flagos_compile import _codegen, _twin
from torch._dynamo.device_interface import CudaInterface
from torch._inductor.runtime.hints import DeviceProperties

H200 = SimpleNamespace(multi_processor_count=132, major=9, minor=0,
                       regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
                       max_threads_per_block=1024, warp_size=32)


def _clear_properties_cache() -> None:
    # DeviceProperties.create is functools.cache'd (flagos' wrapper keeps the original).
    original = getattr(DeviceProperties.create, "__wrapped__", DeviceProperties.create)
    original.__func__.cache_clear()


@pytest.fixture
def cuda_twin(monkeypatch):
    """flagos:N mirrors cuda:N+1; CUDA device properties are an H200's."""
    def twin_of(index: int) -> str:
        return "cuda"

    def native_index(index: int) -> int:
        return index + 1

    for mod in (_twin, _codegen):
        monkeypatch.setattr(mod, "twin_of", twin_of)
    monkeypatch.setattr(_twin, "native_index", native_index)
    monkeypatch.setattr(CudaInterface, "get_device_properties",
                        staticmethod(lambda device=None: H200))
    monkeypatch.setattr(CudaInterface, "get_compute_capability",
                        staticmethod(lambda device=None: 90))
    _clear_properties_cache()
    yield
    _clear_properties_cache()


def test_triton_meta_of_a_cuda_twin_names_target_cuda(cuda_twin) -> None:
    props = DeviceProperties.create(torch.device("flagos", 0))
    # what CachingAutotuner turns into GPUTarget(type, cc, warp_size) and a device guard
    assert props.type == ("hip" if torch.version.hip else "cuda")
    assert props.index == 1
    assert props.cc == 90
    assert props.multi_processor_count == 132
    assert props.warp_size == 32
    assert props == DeviceProperties.create(torch.device("cuda", 1))
    # the literal Inductor writes into the kernel source
    assert "flagos" not in repr(props)


def test_device_properties_unchanged_for_sim_and_other_devices(sim_twin) -> None:
    props = DeviceProperties.create(torch.device("flagos", 0))
    assert props.type == "flagos"  # sim: C++ kernels, no Triton target involved
    assert DeviceProperties.create(torch.device("cpu")).type == "cpu"


def test_wrapper_guards_the_twin_device(cuda_twin) -> None:
    from torch._inductor import utils

    assert utils.device_need_guard("flagos")
    assert utils.device_need_guard("cuda")
    assert not utils.device_need_guard("cpu")
    ops = _codegen.FlagosDeviceOpOverrides()
    guard = ops.device_guard(0)
    # one C++ guard that makes the twin (cuda:1) current as well (flagos.provider_api)
    assert guard == "flagos_device_guard(0)"
    compile(f"with {guard}:\n    {ops.set_device(0)}\n", "<wrapper>", "exec")
    assert ops.import_get_raw_stream_as("get_raw_stream") == (
        "from flagos.provider_api import current_raw_stream as get_raw_stream")


def test_no_device_guard_on_sim(sim_twin) -> None:
    from torch._inductor import utils

    assert not utils.device_need_guard("flagos")
    assert _codegen.FlagosDeviceOpOverrides().device_guard(0) == "flagos_device_guard(0)"


def test_cuda_twin_is_a_gpu_for_inductor(cuda_twin) -> None:
    from torch._inductor import utils

    # Inductor's GPU strategies (fusion, reductions, mm + fused bias activation) apply ...
    assert utils.is_gpu("flagos") and utils.is_gpu("cuda")
    assert not utils.is_gpu("cpu")
    # ... while the process's one native GPU type is still the only one listed.
    assert "flagos" not in list(utils.GPU_TYPES)
    assert utils.get_gpu_type() in ("cuda", "xpu", "mps", "mtia")


def test_sim_is_not_a_gpu_for_inductor(sim_twin) -> None:
    from torch._inductor import utils

    assert not utils.is_gpu("flagos")


def test_patches_are_named() -> None:
    from flagos_compile import _patches

    assert "torch._inductor.runtime.hints.DeviceProperties.create" in _patches.applied
    assert "torch._inductor.utils.GPU_TYPES" in _patches.applied
