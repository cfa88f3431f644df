"""Host tensor descriptors through the HAL on sim: the HAL encodes a descriptor of a
flagos tensor (kernel_encode_tensor_descriptor, ABI 1.5), a kernel takes it by value, and
flagos.triton_driver's launcher passes a Triton kernel's TensorDescriptor arguments as
Triton's CUDA backend does, lowered to the chip's tile copies or to plain loads. The
kernels are a C library for the simulated device (sim_kernels/tiles.c) standing in for
compiled Triton kernels; a real one runs on the cuda HAL (test_triton_driver_gpu.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from flagos import kernels, launch_cache

FORMAT = "flagos-sim-kernels-v1"

pytestmark = pytest.mark.skipif(
    torch.flagos.get_device_properties(0).hal != "sim", reason="sim kernel images")


@pytest.fixture(scope="module")
def module(sim_kernel_image) -> kernels.KernelModule:
    return kernels.KernelModule(0, FORMAT, sim_kernel_image("tiles"))


def _expected(x: torch.Tensor, row: int, col: int, tile: tuple[int, int], fill: float) -> torch.Tensor:
    want = torch.full(tile, fill)
    part = x[row:row + tile[0], col:col + tile[1]]
    want[:part.shape[0], :part.shape[1]] = part
    return want


def test_a_kernel_reads_a_tensor_through_its_descriptor(module):
    x = torch.arange(20 * 16, dtype=torch.float32).reshape(20, 16)[:, :12]  # a strided view
    fx = torch.empty(20, 16, device="flagos").copy_(torch.arange(20 * 16.).reshape(20, 16))[:, :12]
    k = module.kernel("tile_by_descriptor", ("bytes", "i32", "i32", "i64", "i64", "*fp32", "i64", "i64"))
    for row, col, nan in ((4, 2, False), (16, 8, False), (16, 8, True)):
        desc = kernels.encode_tensor_descriptor(fx, (8, 8), fill_nan=nan)
        out = torch.full((8, 8), -1.0, device="flagos")
        k.launch((1,), (1,), desc, *fx.shape, *fx.stride(), out, row, col)
        torch.testing.assert_close(out.cpu(), _expected(x, row, col, (8, 8), float("nan") if nan else 0.0),
                                   equal_nan=True)


def test_a_by_value_parameter_larger_than_a_descriptor_is_refused(module):
    k = module.kernel("tile_by_descriptor", ("bytes", "i32", "i32", "i64", "i64", "*fp32", "i64", "i64"))
    out = torch.full((8, 8), -1.0, device="flagos")
    with pytest.raises(RuntimeError, match="by value takes at most 512 bytes, got 513"):
        k.launch((1,), (1,), bytes(513), 8, 8, 8, 1, out, 0, 0)
    assert torch.equal(out.cpu(), torch.full((8, 8), -1.0))  # nothing launched


def test_a_descriptor_the_device_cannot_make_is_refused_with_the_reason(module):
    x = torch.zeros(8, 8, device="flagos")
    with pytest.raises(RuntimeError, match="innermost stride is 2"):
        kernels.encode_tensor_descriptor(x[:, ::2], (4, 4))
    with pytest.raises(RuntimeError, match="each must be at least 1"):
        kernels.encode_tensor_descriptor(x, (4, 0))
    with pytest.raises(ValueError, match="describes flagos memory"):
        kernels.encode_tensor_descriptor(torch.zeros(4, 4), (4, 4))
    assert torch.flagos.current_device() == 0 and (x + 1).sum().item() == 64  # the device is usable


class _Descriptor(SimpleNamespace):
    """What Triton's TensorDescriptor holds: base, shape, strides, block shape, padding."""


def _launcher(driver, signature: dict, meta, typed: bool = False) -> object:
    """The driver's launcher of a kernel: packing its parameters in Python, or (``typed``: a
    target that names its warp size, as compiled kernels' do) in C++."""
    src = SimpleNamespace(signature=signature, constants={})
    target = SimpleNamespace(backend="cuda", **({"warp_size": 1} if typed else {}))
    md = SimpleNamespace(num_warps=1, shared=0, num_ctas=1, launch_cooperative_grid=False,
                         launch_pdl=False, tensordesc_meta=meta, target=target)
    launcher = driver.launcher_cls(src, md)
    assert (launcher.typed is not None) == typed
    return launcher


def _tile_kernel(module, lowered: str):
    """(function, signature, tensordesc_meta, tile) of the sim's tile kernel taking a
    descriptor ``lowered`` to tile copies or to plain loads."""
    if lowered == "tile copies":
        name, tile = "tile_by_descriptor", (8, 8)
        meta = [{"swizzle": 0, "elem_size": 4, "elem_type": 0, "block_size": list(tile), "fp4_padded": False}]
    else:
        name, tile, meta = "tile_by_pointer", (4, 4), None
    signature = {"desc": f"tensordesc<fp32[{tile[0]}, {tile[1]}]>", "out": "*fp32", "row": "i64", "col": "i64",
                 "BLOCK": "constexpr"}
    return module.kernel(name, ()).handle, signature, meta, tile


def _descriptor(x: torch.Tensor, tile: tuple[int, int]) -> _Descriptor:
    return _Descriptor(base=x, shape=list(x.shape), strides=list(x.stride()), block_shape=list(tile),
                       padding="zero")


@pytest.mark.parametrize("typed", [False, True], ids=["packed", "typed"])
@pytest.mark.parametrize("lowered", ["tile copies", "plain loads"])
def test_the_triton_launcher_passes_descriptors_as_the_cuda_backend(module, lowered, typed):
    triton_driver = pytest.importorskip("flagos.triton_driver")
    driver = triton_driver.HalDriver()
    x = torch.randn(10, 7)
    fx = x.to("flagos")
    function, signature, meta, tile = _tile_kernel(module, lowered)
    launcher = _launcher(driver, signature, meta, typed)
    out = torch.full(tile, -1.0, device="flagos")
    desc = _Descriptor(base=fx, shape=list(fx.shape), strides=list(fx.stride()), block_shape=list(tile),
                       padding="zero")
    launcher(1, 1, 1, driver.get_current_stream(0), function, None, None, None, None, desc, out, 6, 4, 4)
    torch.testing.assert_close(out.cpu(), _expected(x, 6, 4, tile, 0.0))
    if typed:  # a descriptor of another rank than the kernel's is refused before launching
        bad = _Descriptor(base=fx, shape=[70], strides=[1], block_shape=[8], padding="zero")
        with pytest.raises(ValueError, match="shape has 1 entries for a 2-d parameter"):
            launcher(1, 1, 1, driver.get_current_stream(0), function, None, None, None, None, bad, out, 6, 4, 4)
        return
    # a layout flagos does not know is refused, naming the backend
    md = _launcher(driver, signature, meta)
    md.backend = "acme"
    with pytest.raises(NotImplementedError, match="backend 'acme'"):
        md(1, 1, 1, 0, function, None, None, None, None, desc, out, 0, 0, 4)


def test_a_launch_with_encoded_descriptor_bytes_is_never_relaunched(module):
    # Bytes encoded outside the launcher hold the tensor's address, which a relaunch cannot
    # rewrite: a launch-cached op that launches them always runs its Python kernel.
    k = module.kernel("tile_by_descriptor", ("bytes", "i32", "i32", "i64", "i64", "*fp32", "i64", "i64"))

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(8, 8, device=x.device)
        k.launch((1,), (1,), kernels.encode_tensor_descriptor(x, (8, 8)), *x.shape, *x.stride(), out, 0, 0)
        return out

    lib = torch.library.Library("flagos_test_tensor_descriptors", "DEF")
    lib.define("tile(Tensor x) -> Tensor")
    launch_cache.register("flagos_test_tensor_descriptors::tile", "flagos", kernel)
    try:
        before = launch_cache.stats()
        for _ in range(3):
            x = torch.randn(8, 8)
            torch.testing.assert_close(torch.ops.flagos_test_tensor_descriptors.tile(x.to("flagos")).cpu(), x)
        after = launch_cache.stats()
        assert after["kept"] == before["kept"] and after["relaunched"] == before["relaunched"]
        assert after["python"] - before["python"] == 3
    finally:
        lib._destroy()


@pytest.mark.parametrize("lowered", ["tile copies", "plain loads"])
def test_a_triton_launch_with_a_descriptor_is_relaunched_with_each_calls_address(module, lowered):
    # Through the Triton launcher the descriptor's source is kept: a relaunch encodes it
    # again with the new call's tensor (results from a stale address would be the first
    # call's tile, kept alive here).
    triton_driver = pytest.importorskip("flagos.triton_driver")
    driver = triton_driver.HalDriver()
    function, signature, meta, tile = _tile_kernel(module, lowered)
    launcher = _launcher(driver, signature, meta, typed=True)

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(tile, device=x.device)
        launcher(1, 1, 1, driver.get_current_stream(x.device.index), function, None, None, None, None,
                 _descriptor(x, tile), out, 2, 1, tile[0])
        return out

    name = f"tile_{lowered.replace(' ', '_')}"
    lib = torch.library.Library("flagos_test_tensor_descriptors", "FRAGMENT")
    lib.define(f"{name}(Tensor x) -> Tensor")
    launch_cache.register(f"flagos_test_tensor_descriptors::{name}", "flagos", kernel)
    op = getattr(torch.ops.flagos_test_tensor_descriptors, name)
    try:
        before = launch_cache.stats()
        inputs = [torch.randn(9, 6) for _ in range(4)]
        kept_alive = [x.to("flagos") for x in inputs]
        for x, fx in zip(inputs, kept_alive):
            torch.testing.assert_close(op(fx).cpu(), _expected(x, 2, 1, tile, 0.0))
        after = launch_cache.stats()
        assert after["kept"] - before["kept"] == 1
        assert after["relaunched"] - before["relaunched"] == 3
    finally:
        lib._destroy()
