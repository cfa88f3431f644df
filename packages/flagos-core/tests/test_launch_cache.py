"""The launch cache (flagos.launch_cache) on CPU, whose launches are host functions: a
test op's Python kernel allocates its result and calls a C function (a ctypes callback)
as a device kernel would be launched, recording the launch; later calls with the same
argument metadata must run the function from C++ with this call's pointers, and anything
kept launches could get wrong must not be kept. (A temporary of host memory is one: only
flagos memory is known to the launch cache, through the HAL path.)"""

from __future__ import annotations

import ctypes
import struct

import pytest
import torch
from flagos import launch_cache

_lib = torch.library.Library("flagos_test_launch_cache", "DEF")
for _name in ("axpy", "two_launches", "temporary", "aliased", "unkeyed", "nested", "padded",
              "zeroed"):
    _lib.define(f"{_name}(Tensor x, Tensor y, float alpha) -> Tensor")
_lib.define("unkeyed_list(Tensor x, Tensor[] ys, float alpha) -> Tensor")

# void axpy(const uint32_t grid[3], void** params): params are x, y, out, n (int64),
# alpha (float32), each a pointer to its value as a kernel launch passes them
_KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_void_p))
_calls: list[tuple[int, int, int]] = []
_recording_seen: list[bool] = []  # launch_cache.recording() inside the kernels that note it


def _axpy(grid, params) -> None:
    def ptr(i):
        return ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64))[0]

    n = ctypes.cast(params[3], ctypes.POINTER(ctypes.c_int64))[0]
    alpha = ctypes.cast(params[4], ctypes.POINTER(ctypes.c_float))[0]
    x = (ctypes.c_float * n).from_address(ptr(0))
    y = (ctypes.c_float * n).from_address(ptr(1))
    out = (ctypes.c_float * n).from_address(ptr(2))
    for i in range(n):
        out[i] = x[i] + alpha * y[i]
    _calls.append((grid[0], grid[1], grid[2]))


_AXPY = _KERNEL(_axpy)
_AXPY_ADDR = ctypes.cast(_AXPY, ctypes.c_void_p).value


def _launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, alpha: float) -> None:
    """Launch the host kernel as a device kernel is launched (grid, parameter pointers),
    recording the launch when a launch-cached op is running."""
    bits = [x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel(),
            struct.unpack("<I", struct.pack("<f", alpha))[0]]
    launch_cache.record(_AXPY_ADDR, (x.numel(), 1, 1), 32, 0,
                        [(True, 8, b) for b in bits[:3]] + [(False, 8, bits[3]),
                                                            (False, 4, bits[4])], _AXPY)
    values = (ctypes.c_uint64 * 5)(*bits)
    ptrs = (ctypes.c_void_p * 5)(*[ctypes.addressof(values) + 8 * i for i in range(5)])
    _calls.append(("python",))
    _AXPY((ctypes.c_uint32 * 3)(x.numel(), 1, 1), ptrs)


def _checked(x, y):
    if x.dtype != torch.float32 or x.shape != y.shape or not x.is_contiguous():
        raise ValueError("axpy: contiguous float32 x and y of one shape needed")


def _axpy_kernel(x, y, alpha):
    _recording_seen.append(launch_cache.recording())
    _checked(x, y)
    out = torch.empty_like(x)
    _launch(x, y, out, alpha)
    return out


def _two_launches(x, y, alpha):
    out = torch.empty_like(x)
    _launch(x, y, out, alpha)
    _launch(out, y, out, alpha)
    return out


def _temporary(x, y, alpha):
    tmp = y * 1.0  # a pointer no argument or result has
    out = torch.empty_like(x)
    _launch(x, tmp, out, alpha)
    return out


def _aliased(x, y, alpha):
    _launch(x, y, x, alpha)
    return x.view_as(x)  # the result is the argument's memory


def _nested(x, y, alpha):
    inner = ops.axpy(x, y, alpha)  # a cached op's device work inside this one's kernel
    out = torch.empty_like(x)
    _launch(inner, y, out, alpha)
    return out


def _padded(x, y, alpha):
    out = torch.empty(x.numel() + 16)[: x.numel()]  # in a larger buffer than it needs
    _launch(x, y, out, alpha)
    return out


def _zeroed(x, y, alpha):
    out = torch.zeros_like(x)  # device work a relaunch would not do
    _launch(x, y, out, alpha)
    return out


def _unkeyed_list(x, ys, alpha):
    _recording_seen.append(launch_cache.recording())
    out = torch.empty_like(x)
    _launch(x, ys[0], out, alpha)
    return out


for _name, _fn in (("axpy", _axpy_kernel), ("two_launches", _two_launches),
                   ("temporary", _temporary), ("aliased", _aliased),
                   ("unkeyed_list", _unkeyed_list), ("nested", _nested),
                   ("padded", _padded), ("zeroed", _zeroed)):
    launch_cache.register(f"flagos_test_launch_cache::{_name}", "cpu", _fn)

ops = torch.ops.flagos_test_launch_cache


def _delta(before: dict) -> dict:
    return {k: v - before[k] for k, v in launch_cache.stats().items()}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    launch_cache.clear()
    _calls.clear()
    _recording_seen.clear()


def test_repeated_metadata_relaunches_from_cpp_with_this_calls_pointers() -> None:
    before = launch_cache.stats()
    x, y = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(ops.axpy(x, y, 0.5), x + 0.5 * y)
    assert _calls == [("python",), (64, 1, 1)]
    x2, y2 = torch.randn(64), torch.randn(64)
    out = ops.axpy(x2, y2, 0.5)
    torch.testing.assert_close(out, x2 + 0.5 * y2)
    assert _calls[2:] == [(64, 1, 1)]  # the host function, called from C++ with the grid
    assert out.data_ptr() not in (x.data_ptr(), x2.data_ptr())
    assert _delta(before) == {"relaunched": 1, "python": 1, "kept": 1, "unkeyed": 0}


def test_other_metadata_runs_python_and_keeps_its_own_launch() -> None:
    x, y = torch.randn(64), torch.randn(64)
    ops.axpy(x, y, 0.5)
    others = [lambda: (torch.randn(32), torch.randn(32), 0.5),        # sizes
              lambda: (torch.randn(64), torch.randn(64), 2.0),        # a scalar argument
              lambda: (torch.randn(65)[1:], torch.randn(64), 0.5),    # 4-byte aligned only
              lambda: (torch.randn(2, 32), torch.randn(2, 32), 0.5)]  # dims
    for make in others:
        a, b, alpha = make()
        torch.testing.assert_close(ops.axpy(a, b, alpha), a + alpha * b)
    assert [c for c in _calls if c == ("python",)] == [("python",)] * 5
    before = launch_cache.stats()
    for make in others:
        a, b, alpha = make()
        torch.testing.assert_close(ops.axpy(a, b, alpha), a + alpha * b)
    assert _delta(before) == {"relaunched": 4, "python": 0, "kept": 0, "unkeyed": 0}


def test_kernel_errors_reach_the_caller_and_are_not_kept() -> None:
    with pytest.raises(ValueError, match="axpy: contiguous float32"):
        ops.axpy(torch.randn(4), torch.randn(5), 1.0)
    before = launch_cache.stats()
    with pytest.raises(ValueError):
        ops.axpy(torch.randn(4), torch.randn(5), 1.0)
    assert _delta(before)["relaunched"] == 0


def test_several_launches_are_kept_and_run_in_order() -> None:
    before = launch_cache.stats()
    for _ in range(3):
        x, y = torch.randn(16), torch.randn(16)
        torch.testing.assert_close(ops.two_launches(x, y, 0.5), x + y)  # the second reads the first's
    assert _delta(before) == {"relaunched": 2, "python": 1, "kept": 1, "unkeyed": 0}
    assert _calls[-2:] == [(16, 1, 1), (16, 1, 1)]


@pytest.mark.parametrize("op", ["temporary", "aliased", "padded", "zeroed"])
def test_launches_a_kept_one_could_get_wrong_are_not_kept(op: str) -> None:
    before = launch_cache.stats()
    for _ in range(3):
        getattr(ops, op)(torch.randn(16), torch.randn(16), 1.0)
    assert _delta(before) == {"relaunched": 0, "python": 3, "kept": 0, "unkeyed": 0}


def test_a_kernel_running_another_cached_op_is_not_kept() -> None:
    """Its one recorded launch is not its whole device work (the inner op's launch, from
    Python or from C++, is not in it)."""
    before = launch_cache.stats()
    for _ in range(3):
        x, y = torch.randn(16), torch.randn(16)
        torch.testing.assert_close(ops.nested(x, y, 2.0), x + 4.0 * y)
    # the inner axpy: kept once, then relaunched; the outer op always through Python
    assert _delta(before) == {"relaunched": 2, "python": 4, "kept": 1, "unkeyed": 0}


def test_an_empty_grid_is_not_launched() -> None:
    ops.axpy(torch.randn(0), torch.randn(0), 1.0)
    before, calls = launch_cache.stats(), len(_calls)
    assert ops.axpy(torch.randn(0), torch.randn(0), 1.0).shape == (0,)
    assert _delta(before)["relaunched"] == 1 and len(_calls) == calls


def test_arguments_of_kinds_not_keyed_always_run_python() -> None:
    before = launch_cache.stats()
    for _ in range(2):
        x, y = torch.randn(8), torch.randn(8)
        torch.testing.assert_close(ops.unkeyed_list(x, [y], 1.0), x + y)
    assert _delta(before) == {"relaunched": 0, "python": 2, "kept": 0, "unkeyed": 2}


def test_disabled_and_clear_send_calls_through_python() -> None:
    x, y = torch.randn(8), torch.randn(8)
    ops.axpy(x, y, 1.0)
    before = launch_cache.stats()
    with launch_cache.disabled():
        ops.axpy(x, y, 1.0)
    launch_cache.clear()
    ops.axpy(x, y, 1.0)  # kept again
    ops.axpy(x, y, 1.0)
    assert _delta(before) == {"relaunched": 1, "python": 2, "kept": 1, "unkeyed": 0}


def test_calls_that_cannot_be_kept_are_not_recorded() -> None:
    # Recording costs (kernels watched for device work, launches described): a call the
    # cache cannot key, or any call while it is disabled, runs its kernel unrecorded.
    x, y = torch.randn(8), torch.randn(8)
    ops.unkeyed_list(x, [y], 1.0)
    with launch_cache.disabled():
        ops.axpy(x, y, 1.0)
    ops.axpy(x, y, 1.0)
    assert _recording_seen == [False, False, True]


def test_nothing_records_outside_a_launch_cached_op() -> None:
    assert not launch_cache.recording()
    assert not launch_cache.record(_AXPY_ADDR, (1, 1, 1), 32, 0, [])


def test_registering_twice_or_for_another_device_is_refused() -> None:
    with pytest.raises(RuntimeError, match="registered for CPU already"):
        launch_cache.register("flagos_test_launch_cache::axpy", "cpu", _axpy_kernel)
    with pytest.raises(ValueError, match="'xpu' is not one of flagos, cuda, cpu"):
        launch_cache.register("flagos_test_launch_cache::unkeyed", "xpu", _axpy_kernel)


class _Metadata:
    num_warps, shared, num_ctas = 4, 1024, 1
    launch_cooperative_grid = launch_pdl = False
    global_scratch_size = profile_scratch_size = 0


class _Compiled:
    """What Triton's kernel[grid](...) returns, as much as record_triton reads."""

    function = 0xBEEF

    def __init__(self, signature: dict, **metadata) -> None:
        self.src = type("Src", (), {"signature": signature})()
        self.metadata = _Metadata()
        for k, v in metadata.items():
            setattr(self.metadata, k, v)


def test_triton_launches_are_recorded_as_its_cuda_launcher_passes_them(monkeypatch) -> None:
    """Constexprs left out, pointers as data pointers, scalars at their C size (floats
    as their bits), then the launcher's two scratch pointers."""
    pytest.importorskip("triton")
    got: list = []
    monkeypatch.setattr(launch_cache, "recording", lambda: True)
    monkeypatch.setattr(launch_cache, "record", lambda *a: got.append(a) or True)
    monkeypatch.setattr(launch_cache, "_triton_version", lambda: (3, 6))
    x = torch.zeros(4)
    sig = {"x": "*bf16", "n": "i32", "big": "i64", "BLOCK": "constexpr", "f": "fp32",
           "neg": "i32"}
    compiled = _Compiled(sig)
    assert launch_cache.record_triton(compiled, (7, 2), [x, 5, 1 << 40, 64, 0.5, -1])
    function, grid, threads, shared, params, keepalive = got[0]
    assert (function, grid, threads, shared) == (0xBEEF, [7, 2, 1], 128, 1024)
    assert keepalive is compiled  # owns the function's module
    assert params == [(True, 8, x.data_ptr()), (False, 4, 5), (False, 8, 1 << 40),
                      (False, 4, 0x3F000000), (False, 4, 0xFFFFFFFF), (False, 8, 0),
                      (False, 8, 0)]


@pytest.mark.parametrize("why", ["cluster", "scratch", "descriptor", "version", "hook",
                                 "overflow"])
def test_triton_launches_a_kept_launch_cannot_repeat_are_not_recorded(monkeypatch, why) -> None:
    triton = pytest.importorskip("triton")
    monkeypatch.setattr(launch_cache, "recording", lambda: True)
    monkeypatch.setattr(launch_cache, "record", lambda *a: pytest.fail("recorded"))
    monkeypatch.setattr(launch_cache, "_triton_version",
                        lambda: (3, 99) if why == "version" else (3, 6))
    sig = {"x": ("*fp32", "i32") if why == "descriptor" else "*fp32", "f": "fp32"}
    meta = {"cluster": {"num_ctas": 2}, "scratch": {"global_scratch_size": 128}}.get(why, {})
    if why == "hook":
        monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
    f = 1e300 if why == "overflow" else 1.0  # beyond float32: Triton's C cast, not mirrored
    assert not launch_cache.record_triton(_Compiled(sig, **meta), (1, 1), [torch.zeros(1), f])
