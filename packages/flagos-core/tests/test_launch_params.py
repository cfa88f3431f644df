"""Launch parameters converted in C++ (flagos._C._TypedLauncher, the Triton driver's launch
path) are the bits the Python packer (flagos.launch_cache.pack_params) makes: a sim kernel
echoes every parameter it was given back into a buffer."""

from __future__ import annotations

import math
import types

import pytest
import torch
from flagos import _C, kernels, launch_cache

SIGNATURE = ("*u64", "i8", "i16", "i32", "i64", "fp16", "bf16", "fp32", "fp64", "*fp32")

pytestmark = pytest.mark.skipif(
    torch.flagos.get_device_properties(0).hal != "sim", reason="sim kernel images")


@pytest.fixture(scope="module")
def echo(sim_kernel_image) -> kernels.Kernel:
    from flagos_hal import sim_kernels

    return kernels.KernelModule(0, sim_kernels.FORMAT, sim_kernel_image("params")).kernel("echo", SIGNATURE)


def _echoed_typed(echo: kernels.Kernel, values: tuple) -> list[int]:
    out = torch.zeros(9, dtype=torch.int64, device="flagos")
    launcher = _C._TypedLauncher(launch_cache.param_kinds(SIGNATURE), 1, 0)
    launcher.launch(0, echo.handle, 1, 1, 1, None, echo.module, (out, *values))
    return [v & (2**64 - 1) for v in out.cpu().tolist()]


def _packed(values: tuple) -> list[int]:
    return [bits for _, _, bits in launch_cache.pack_params(SIGNATURE[1:], values)]


VALUES = [
    (0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, None),
    (-1, -2, -3, -4, -0.0, -2.5, 1 / 3, -1e300, None),
    (127, 32767, 2**31 - 1, 2**63 - 1, 65504.0, 3.0e38, 3.4028234e38, math.pi, 0),
    (-128, -32768, -(2**31), -(2**63), 1e-7, 1.00390625, 1e-45, 5e-324, 4096),
    (True, 300, 2**32 + 5, 7, 0.1, 0.1, 0.1, 0.1, 2**48 + 8),
    (3, 4, 5, 6, math.inf, -math.inf, math.inf, -math.inf, None),
]


@pytest.mark.parametrize("values", VALUES, ids=range(len(VALUES)))
def test_typed_launches_pass_what_the_python_packer_packs(echo, values):
    assert _echoed_typed(echo, values) == _packed(values)


def test_both_launch_paths_echo_the_same_bits(echo):
    values = (-7, 1234, -99999, 2**40, 0.3, -7.75, 2.5e-3, 1e-310, 64)
    out = torch.zeros(9, dtype=torch.int64, device="flagos")
    echo.launch((1,), (1,), out, *values)
    assert [v & (2**64 - 1) for v in out.cpu().tolist()] == _echoed_typed(echo, values)


def test_a_tensor_passes_its_data_pointer_and_an_object_its_data_ptr(echo):
    base = torch.zeros(16, device="flagos")
    view = base[5:]
    wrapped = types.SimpleNamespace(data_ptr=lambda: view.data_ptr())
    for pointer in (view, wrapped, view.data_ptr()):
        got = _echoed_typed(echo, (0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, pointer))
        assert got[-1] == base.data_ptr() + 5 * 4


def test_bad_arguments_are_refused_and_the_device_stays_usable(echo):
    launcher = _C._TypedLauncher(launch_cache.param_kinds(SIGNATURE), 1, 0)
    out = torch.zeros(9, dtype=torch.int64, device="flagos")
    with pytest.raises(TypeError):
        launcher.launch(0, echo.handle, 1, 1, 1, None, echo.module,
                        (out, "one", 0, 0, 0, 0.0, 0.0, 0.0, 0.0, None))
    with pytest.raises(TypeError):
        launcher.launch(0, echo.handle, 1, 1, 1, None, echo.module,
                        (out, 1, 0, 0, 0, 0.0, "half", 0.0, 0.0, None))
    with pytest.raises(RuntimeError, match="a kernel of 10 arguments was given 3"):
        launcher.launch(0, echo.handle, 1, 1, 1, None, echo.module, (out, 1, 2))
    with pytest.raises(RuntimeError, match="parameter kind 'q'"):
        _C._TypedLauncher("pq", 1, 0)
    assert out.cpu().eq(0).all()  # nothing was launched
    assert _echoed_typed(echo, VALUES[1]) == _packed(VALUES[1])


def test_parameter_kinds_follow_tritons_types():
    assert launch_cache.param_kinds(SIGNATURE) == "p1248hbfdp"
    assert launch_cache.param_kinds(["*bf16", "u1", "u32", "f32", "constexpr"]) == "p14fc"
    assert launch_cache.param_kinds(["*fp32", ("i32", "i32")]) is None
    assert launch_cache.param_kinds(["tensordesc<fp16[64, 64]>"]) is None
