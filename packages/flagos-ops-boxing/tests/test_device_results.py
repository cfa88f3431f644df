"""Results of CUDA-twin kernels are made in flagos memory (flagos-core's
csrc/engines/twin/device_results.h): no copy after the kernel, every byte counted by the flagos
allocator, native CUDA allocations elsewhere untouched. Needs the CUDA HAL on a GPU."""

from __future__ import annotations

import os
import threading

import flagos
import pytest
import torch
import torch.nn.functional as F
from flagos.provider_api import results_in_flagos_memory

pytestmark = pytest.mark.skipif(os.environ.get("FLAGOS_TEST_HW", "sim") != "cuda",
                                reason="needs the CUDA HAL on a GPU")


def _cuda_allocations() -> int:
    return torch.cuda.memory_stats().get("allocation.all.allocated", 0)


def test_flagos_built_against_cuda_torch_has_device_results() -> None:
    assert flagos.provider_api.device_results(), (
        "flagos-core was built without the CUDA results allocator: see the CMake warning")


def test_conv_and_batch_norm_results_are_flagos_memory_without_copies() -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 16, 16), torch.randn(8, 3, 3, 3), torch.randn(8)
    rm, rv = torch.randn(8), torch.rand(8) + 0.5
    dx, dw, db, drm, drv = (t.to("flagos") for t in (x, w, b, rm, rv))
    F.conv2d(dx, dw, db, padding=1)  # warm: cuDNN plans, workspaces
    torch.flagos.synchronize()
    before_cuda, before_flagos = _cuda_allocations(), torch.flagos.memory_allocated()
    with flagos.routing.override({"default": ["boxing"]}):
        y = F.conv2d(dx, dw, db, padding=1)
        z = F.batch_norm(y, drm, drv, training=False)
    torch.flagos.synchronize()
    # the kernels allocated nothing from the CUDA caching allocator ...
    assert _cuda_allocations() == before_cuda
    # ... their results are flagos tensors in flagos memory, counted there
    assert y.device.type == z.device.type == "flagos"
    assert torch.flagos.memory_allocated() >= before_flagos + 2 * y.numel() * 4
    want_y = F.conv2d(x, w, b, padding=1)
    torch.testing.assert_close(y.cpu(), want_y, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(z.cpu(), F.batch_norm(want_y, rm, rv, training=False),
                               rtol=1e-3, atol=1e-3)
    held = torch.flagos.memory_allocated()
    del y, z
    assert torch.flagos.memory_allocated() < held


def test_functional_op_runs_the_cuda_kernel_once() -> None:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    da, db = a.to("flagos"), b.to("flagos")
    flagos.routing.reset_stats()
    before_cuda = _cuda_allocations()
    with flagos.routing.override({"default": ["boxing"]}):
        got = torch.relu(da + db)
    assert _cuda_allocations() == before_cuda  # both results made in flagos memory
    torch.testing.assert_close(got.cpu(), torch.relu(a + b))
    stats = flagos.routing.stats()
    # the functional forms reach the twin (their result allocated in flagos memory), not
    # the out= forms a composite kernel would call after allocating a flagos result
    assert stats["aten::add.Tensor"]["boxing"]["calls"] == 1
    assert stats["aten::relu"]["boxing"]["calls"] == 1
    assert "aten::add.out" not in stats or stats["aten::add.out"]["boxing"]["calls"] == 0


def test_native_cuda_work_keeps_the_cuda_allocator() -> None:
    # also right after a twin kernel that raised: its scope ended with it
    with pytest.raises(RuntimeError, match="size of tensor"):
        torch.ones(3, device="flagos") + torch.ones(4, device="flagos")
    before_flagos = torch.flagos.memory_allocated()
    before_cuda = _cuda_allocations()
    native = torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda")
    assert _cuda_allocations() > before_cuda
    assert torch.flagos.memory_allocated() == before_flagos
    assert native.device.type == "cuda"


def test_native_cuda_thread_beside_flagos_ops() -> None:
    # Another thread's CUDA allocations stay CUDA memory while this one runs flagos ops.
    # A flagos block would be a CUDA tensor too: what tells them apart is that the CUDA
    # caching allocator counts each of the native thread's allocations (the flagos thread
    # makes none).
    errors: list[BaseException] = []
    stop = threading.Event()
    native_allocs = [0]

    def native_loop() -> None:
        try:
            while not stop.is_set():
                t = torch.ones(1024, device="cuda") * 2
                assert t.device.type == "cuda" and float(t.sum()) == 2048.0
                native_allocs[0] += 3  # ones, the product, the sum
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    before_cuda = _cuda_allocations()

    th = threading.Thread(target=native_loop)
    th.start()
    try:
        x = torch.randn(32, 32)
        dx = x.to("flagos")
        for _ in range(200):
            got = (dx * 3).sum(dim=0)
        torch.testing.assert_close(got.cpu(), (x * 3).sum(dim=0), rtol=1e-4, atol=1e-4)
    finally:
        stop.set()
        th.join()
    assert not errors, errors
    assert native_allocs[0] > 0
    assert _cuda_allocations() - before_cuda >= native_allocs[0]


_lib = torch.library.Library("flagos_results_test", "DEF")
for _name in ("declared", "undeclared"):
    _lib.define(f"{_name}(Tensor x) -> Tensor")
    _lib.impl(_name, lambda x: torch.empty_like(x).copy_(x).mul_(2), "CUDA")
results_in_flagos_memory(["flagos_results_test::declared"])


@pytest.mark.parametrize("name", ["declared", "undeclared"])
def test_extension_op_results_are_flagos_memory_where_declared(name: str) -> None:
    """An extension op's CUDA kernel runs with its allocations in flagos memory only where
    its package declared them factory-only (results_in_flagos_memory); otherwise its
    result comes from the CUDA caching allocator and is copied."""
    op = getattr(torch.ops.flagos_results_test, name)
    x = torch.randn(1000)
    dx = x.to("flagos")
    with flagos.routing.override({f"flagos_results_test::{name}": ["boxing"]}):
        op(dx)  # warm
        torch.flagos.synchronize()
        before = _cuda_allocations()
        got = op(dx)
        torch.flagos.synchronize()
    assert (_cuda_allocations() == before) == (name == "declared")
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), x * 2)
