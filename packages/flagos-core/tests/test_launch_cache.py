"""The launch cache (flagos.launch_cache) on sim: a test op's Python kernel allocates its
result and launches a C kernel for the simulated device through the HAL (an image built
here), as a Triton kernel's wrapper does; later calls with the same argument metadata must
run the launches from C++ with this call's pointers, and anything kept launches could get
wrong must not be kept."""

from __future__ import annotations

import pytest
import torch
from flagos import kernels, launch_cache

FORMAT = "flagos-sim-kernels-v1"
BLOCK = 64

pytestmark = pytest.mark.skipif(
    torch.flagos.get_device_properties(0).hal != "sim", reason="sim kernel images")

_python_calls: list[str] = []    # the op whose Python kernel ran, at each such call
_recording_seen: list[bool] = []  # launch_cache.recording() inside the kernels that note it


def _checked(x, y):
    if x.dtype != torch.float32 or x.shape != y.shape or not x.is_contiguous():
        raise ValueError("axpy: contiguous float32 x and y of one shape needed")


@pytest.fixture(scope="module")
def ops(sim_kernel_image):
    """flagos_test_launch_cache::<op>(x, y, alpha), each launch-cached on flagos; axpy is
    out = alpha * x + y."""
    axpy = kernels.KernelModule(0, FORMAT, sim_kernel_image("axpy")).kernel(
        "axpy", ("*fp32", "*fp32", "*fp32", "fp32", "i64"))

    def launch(x, y, out, alpha):
        n = x.numel()
        axpy.launch(((n + BLOCK - 1) // BLOCK,), (BLOCK,), x, y, out, alpha, n)
        return out

    def axpy_kernel(x, y, alpha):
        _python_calls.append("axpy")
        _recording_seen.append(launch_cache.recording())
        _checked(x, y)
        return launch(x, y, torch.empty_like(x), alpha)

    def two_launches(x, y, alpha):
        _python_calls.append("two_launches")
        out = launch(x, y, torch.empty_like(x), alpha)
        return launch(out, y, out, alpha)  # the second reads the first's result

    def temporary(x, y, alpha):
        _python_calls.append("temporary")
        return launch(x, y * 1.0, torch.empty_like(x), alpha)  # a temporary ATen computed

    def aliased(x, y, alpha):
        _python_calls.append("aliased")
        launch(x, y, x, alpha)
        return x.view_as(x)  # the result is the argument's memory

    def nested(x, y, alpha):
        _python_calls.append("nested")
        inner = torch.ops.flagos_test_launch_cache.axpy(x, y, alpha)  # a cached op inside
        return launch(inner, y, torch.empty_like(x), alpha)

    def padded(x, y, alpha):
        _python_calls.append("padded")
        out = torch.empty(x.numel() + 16, device=x.device)[: x.numel()]  # a larger buffer
        return launch(x, y, out, alpha)

    def spoiled(x, y, alpha):
        _python_calls.append("spoiled")
        launch_cache.spoil_recording("a test's own reason")  # as a launch Triton made itself
        return launch(x, y, torch.empty_like(x), alpha)

    def zeroed(x, y, alpha):
        _python_calls.append("zeroed")
        return launch(x, y, torch.zeros_like(x), alpha)  # device work a relaunch would not do

    def around_unkeyed(x, y, alpha):
        _python_calls.append("around_unkeyed")
        inner = torch.ops.flagos_test_launch_cache.unkeyed_list(x, y, [alpha])
        _recording_seen.append(launch_cache.recording())  # its own, restored
        return launch(inner, y, torch.empty_like(x), alpha)

    def by_mode(x, y, alpha, mode):
        _python_calls.append(f"by_mode {mode}")
        return launch(x, y, torch.empty_like(x), alpha * len(mode))

    def unkeyed_list(x, y, alphas):
        _python_calls.append("unkeyed_list")
        _recording_seen.append(launch_cache.recording())
        return launch(x, y, torch.empty_like(x), alphas[0])

    def list_sum(xs, alpha):
        _python_calls.append(f"list_sum {len(xs)}")
        out = launch(xs[0], xs[1], torch.empty_like(xs[0]), alpha)
        for x in xs[2:]:
            out = launch(x, out, out, alpha)
        return out

    lib = torch.library.Library("flagos_test_launch_cache", "DEF")
    kernels_ = {"axpy": axpy_kernel, "two_launches": two_launches, "temporary": temporary,
                "aliased": aliased, "nested": nested, "padded": padded, "zeroed": zeroed,
                "spoiled": spoiled,
                "around_unkeyed": around_unkeyed}
    for name, fn in kernels_.items():
        lib.define(f"{name}(Tensor x, Tensor y, float alpha) -> Tensor")
        launch_cache.register(f"flagos_test_launch_cache::{name}", "flagos", fn)
    lib.define("by_mode(Tensor x, Tensor y, float alpha, str mode) -> Tensor")
    launch_cache.register("flagos_test_launch_cache::by_mode", "flagos", by_mode)
    lib.define("list_sum(Tensor[] xs, float alpha) -> Tensor")
    launch_cache.register("flagos_test_launch_cache::list_sum", "flagos", list_sum)
    lib.define("unkeyed_list(Tensor x, Tensor y, float[] alphas) -> Tensor")
    launch_cache.register("flagos_test_launch_cache::unkeyed_list", "flagos", unkeyed_list)
    yield torch.ops.flagos_test_launch_cache
    lib._destroy()


def _delta(before: dict) -> dict:
    return {k: v - before[k] for k, v in launch_cache.stats().items()}


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="flagos")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    launch_cache.clear()
    _python_calls.clear()
    _recording_seen.clear()


def test_repeated_metadata_relaunches_from_cpp_with_this_calls_pointers(ops) -> None:
    before = launch_cache.stats()
    x, y = _randn(300), _randn(300)
    torch.testing.assert_close(ops.axpy(x, y, 0.5).cpu(), (0.5 * x + y).cpu())
    x2, y2 = _randn(300), _randn(300)
    out = ops.axpy(x2, y2, 0.5)
    torch.testing.assert_close(out.cpu(), (0.5 * x2 + y2).cpu())
    assert _python_calls == ["axpy"]  # the second call ran from C++
    assert out.data_ptr() not in (x.data_ptr(), x2.data_ptr())
    assert _delta(before) == {"relaunched": 1, "python": 1, "kept": 1, "unkeyed": 0}


def test_other_metadata_runs_python_and_keeps_its_own_launch(ops) -> None:
    x, y = _randn(64), _randn(64)
    ops.axpy(x, y, 0.5)
    others = [lambda: (_randn(32), _randn(32), 0.5),        # sizes
              lambda: (_randn(64), _randn(64), 2.0),        # a scalar argument
              lambda: (_randn(65)[1:], _randn(64), 0.5),    # 4-byte aligned only
              lambda: (_randn(2, 32), _randn(2, 32), 0.5)]  # dims
    for make in others:
        a, b, alpha = make()
        torch.testing.assert_close(ops.axpy(a, b, alpha).cpu(), (alpha * a + b).cpu())
    assert _python_calls == ["axpy"] * 5
    before = launch_cache.stats()
    for make in others:
        a, b, alpha = make()
        torch.testing.assert_close(ops.axpy(a, b, alpha).cpu(), (alpha * a + b).cpu())
    assert _delta(before) == {"relaunched": 4, "python": 0, "kept": 0, "unkeyed": 0}


def test_kernel_errors_reach_the_caller_and_are_not_kept(ops) -> None:
    with pytest.raises(ValueError, match="axpy: contiguous float32"):
        ops.axpy(_randn(4), _randn(5), 1.0)
    before = launch_cache.stats()
    with pytest.raises(ValueError):
        ops.axpy(_randn(4), _randn(5), 1.0)
    assert _delta(before)["relaunched"] == 0


def test_several_launches_are_kept_and_run_in_order(ops) -> None:
    before = launch_cache.stats()
    for _ in range(3):
        x, y = _randn(300), _randn(300)
        want = 0.5 * (0.5 * x + y) + y
        torch.testing.assert_close(ops.two_launches(x, y, 0.5).cpu(), want.cpu())
    assert _delta(before) == {"relaunched": 2, "python": 1, "kept": 1, "unkeyed": 0}


@pytest.mark.parametrize(("op", "why"), [
    ("temporary", "device work besides its launches"),
    ("aliased", "a result that is no fresh tensor"),
    ("padded", "a result that is no fresh tensor"),
    ("zeroed", "device work besides its launches"),
    ("spoiled", "a test's own reason")])
def test_launches_a_kept_one_could_get_wrong_are_not_kept(ops, op: str, why: str) -> None:
    before, before_not_kept = launch_cache.stats(), launch_cache.not_kept()
    for _ in range(3):
        x, y = _randn(16), _randn(16)
        want = 1.5 * x + y
        torch.testing.assert_close(getattr(ops, op)(x, y, 1.5).cpu(), want.cpu())
    assert _delta(before) == {"relaunched": 0, "python": 3, "kept": 0, "unkeyed": 0}
    # each call counted once, under why it was not kept
    not_kept = launch_cache.not_kept_since(before_not_kept)
    assert list(not_kept.values()) == [3] and next(iter(not_kept)).startswith(why), not_kept


def test_a_kernel_running_another_cached_op_is_not_kept(ops) -> None:
    """Its one recorded launch is not its whole device work (the inner op's launch, from
    Python or from C++, is not in it)."""
    before = launch_cache.stats()
    for _ in range(3):
        x, y = _randn(16), _randn(16)
        torch.testing.assert_close(ops.nested(x, y, 2.0).cpu(), (2.0 * (2.0 * x + y) + y).cpu())
    # the inner axpy: kept once, then relaunched; the outer op always through Python
    assert _delta(before) == {"relaunched": 2, "python": 4, "kept": 1, "unkeyed": 0}


def test_a_kernel_running_an_unkeyed_cached_op_keeps_recording_and_is_not_kept(ops) -> None:
    before = launch_cache.stats()
    for _ in range(2):
        x, y = _randn(16), _randn(16)
        torch.testing.assert_close(ops.around_unkeyed(x, y, 2.0).cpu(),
                                   (2.0 * (2.0 * x + y) + y).cpu())
    # the inner call ran unrecorded, the outer's recording was open again after it
    assert _recording_seen == [False, True, False, True]
    assert _delta(before) == {"relaunched": 0, "python": 4, "kept": 0, "unkeyed": 2}


def test_a_kernel_of_another_device_than_the_calls_is_not_kept(ops, two_devices) -> None:
    # the axpy module is loaded on flagos:0: a call on flagos:1 launches it on flagos:0's
    # stream (sim memory is host memory, so it computes), which the call's own stream does
    # not wait for; a relaunch would run it the same way: not kept
    before = launch_cache.stats()
    for _ in range(2):
        x, y = _randn(16).to("flagos:1"), _randn(16).to("flagos:1")
        torch.flagos.synchronize(1)  # the inputs written before flagos:0's stream reads them
        out = ops.axpy(x, y, 0.5)
        torch.flagos.synchronize(0)
        torch.testing.assert_close(out.cpu(), (0.5 * x + y).cpu())
    assert _delta(before) == {"relaunched": 0, "python": 2, "kept": 0, "unkeyed": 0}


def test_an_empty_grid_is_not_launched(ops) -> None:
    ops.axpy(_randn(0), _randn(0), 1.0)
    before = launch_cache.stats()
    assert ops.axpy(_randn(0), _randn(0), 1.0).shape == (0,)
    assert _delta(before)["relaunched"] == 1


def test_a_string_argument_is_part_of_the_key(ops) -> None:
    # gelu's approximate="tanh", a loss's reduction: each mode keeps its own launches
    before = launch_cache.stats()
    modes = ["a", "abcdefgh", "abcdefghi", "a", "abcdefgh", "abcdefghi", "b"]
    for mode in modes:
        x, y = _randn(16), _randn(16)
        torch.testing.assert_close(ops.by_mode(x, y, 0.5, mode).cpu(),
                                   (0.5 * len(mode) * x + y).cpu())
    assert _python_calls == ["by_mode a", "by_mode abcdefgh", "by_mode abcdefghi", "by_mode b"]
    assert _delta(before) == {"relaunched": 3, "python": 4, "kept": 4, "unkeyed": 0}


def test_a_list_of_tensors_is_keyed_and_its_elements_relaunched(ops) -> None:
    # cat's and stack's inputs: each element keyed, each pointer relaunched as this call's
    before = launch_cache.stats()
    for n in (2, 3, 2, 3, 3):
        xs = [_randn(16) for _ in range(n)]
        want = 0.5 * xs[0] + xs[1]
        for x in xs[2:]:
            want = 0.5 * x + want
        torch.testing.assert_close(ops.list_sum(xs, 0.5).cpu(), want.cpu())
    assert _python_calls == ["list_sum 2", "list_sum 3"]
    assert _delta(before) == {"relaunched": 3, "python": 2, "kept": 2, "unkeyed": 0}
    xs = [_randn(16), _randn(16)]
    calls = len(_python_calls)
    # one tensor twice: its pointer is two elements', so the call is not kept, and the
    # next call of that key runs Python again (a relaunch would read element 0 twice)
    torch.testing.assert_close(ops.list_sum([xs[0], xs[0]], 1.0).cpu(), (2 * xs[0]).cpu())
    torch.testing.assert_close(ops.list_sum(xs, 1.0).cpu(), (xs[0] + xs[1]).cpu())
    assert len(_python_calls) == calls + 2


def test_arguments_of_kinds_not_keyed_always_run_python(ops) -> None:
    before = launch_cache.stats()
    for _ in range(2):
        x, y = _randn(8), _randn(8)
        torch.testing.assert_close(ops.unkeyed_list(x, y, [1.0]).cpu(), (x + y).cpu())
    assert _delta(before) == {"relaunched": 0, "python": 2, "kept": 0, "unkeyed": 2}


def test_disabled_and_clear_send_calls_through_python(ops) -> None:
    x, y = _randn(8), _randn(8)
    ops.axpy(x, y, 1.0)
    before = launch_cache.stats()
    with launch_cache.disabled():
        ops.axpy(x, y, 1.0)
    launch_cache.clear()
    ops.axpy(x, y, 1.0)  # kept again
    ops.axpy(x, y, 1.0)
    assert _delta(before) == {"relaunched": 1, "python": 2, "kept": 1, "unkeyed": 0}


def test_calls_that_cannot_be_kept_are_not_recorded(ops) -> None:
    # Recording costs (kernels watched for device work, launches described): a call the
    # cache cannot key, or any call while it is disabled, runs its kernel unrecorded.
    x, y = _randn(8), _randn(8)
    ops.unkeyed_list(x, y, [1.0])
    with launch_cache.disabled():
        ops.axpy(x, y, 1.0)
    ops.axpy(x, y, 1.0)
    assert _recording_seen == [False, False, True]


def test_nothing_records_outside_a_launch_cached_op() -> None:
    assert not launch_cache.recording()


def test_a_calls_launches_are_made_on_the_flagos_device_its_tensors_are_on() -> None:
    assert launch_cache.hal_device_for(torch.device("flagos", 0)) == 0
    # the sim's twin is the CPU, which has no streams to order a HAL launch with
    assert launch_cache.hal_device_for(torch.device("cpu")) is None


def test_registering_twice_or_for_another_device_is_refused(ops) -> None:
    with pytest.raises(RuntimeError, match="registered for PrivateUse1 already"):
        launch_cache.register("flagos_test_launch_cache::axpy", "flagos", lambda *a: None)
    with pytest.raises(ValueError, match="'cpu' is not one of flagos, cuda"):
        launch_cache.register("flagos_test_launch_cache::zeroed", "cpu", lambda *a: None)
