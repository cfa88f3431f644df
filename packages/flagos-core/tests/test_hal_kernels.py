"""Kernels through the HAL's kernel extension (flagos.kernels) on sim, and the launch
cache relaunching them from C++: a C kernel library for the simulated device is built
here, loaded as an image, launched on flagos tensors on the current flagos stream, and
recorded by a launch-cached op.

The module also runs in a child with FLAGOS_NO_TWIN=1 (test_without_a_twin), where
flagos memory is opaque: a kernel launch needs no twin.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import types

import flagos.routing
import pytest
import torch
from flagos import kernels, launch_cache

FORMAT = "flagos-sim-kernels-v1"
SIGNATURE = ("*fp32", "*fp32", "*fp32", "fp32", "i64")
BLOCK = 64

pytestmark = pytest.mark.skipif(
    torch.flagos.get_device_properties(0).hal != "sim", reason="sim kernel images")


@pytest.fixture(scope="module")
def image(sim_kernel_image) -> bytes:
    return sim_kernel_image("axpy")


@pytest.fixture(scope="module")
def axpy(image) -> kernels.Kernel:
    return kernels.KernelModule(0, FORMAT, image).kernel("axpy", SIGNATURE)


def _launch(kernel: kernels.Kernel, x: torch.Tensor, y: torch.Tensor, alpha: float,
            out: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(x) if out is None else out
    n = x.numel()
    kernel.launch(((n + BLOCK - 1) // BLOCK,), (BLOCK,), x, y, out, alpha, n)
    return out


def test_the_device_describes_its_kernels():
    twin = torch.flagos.get_device_properties(0).twin_device
    assert twin == ("none" if os.environ.get("FLAGOS_NO_TWIN") == "1" else "cpu")
    assert kernels.formats(0) == [FORMAT] and kernels.has_kernels(0)
    t = kernels.target(0)
    assert t.backend == "" and t.warp_size == 1 and t.max_threads_per_block >= 1


def test_launch_on_flagos_tensors_matches_the_cpu(axpy):
    x, y = torch.randn(1000), torch.randn(1000)
    got = _launch(axpy, x.to("flagos"), y.to("flagos"), 2.5)
    torch.testing.assert_close(got.cpu(), 2.5 * x + y)


def test_launches_are_ordered_on_the_current_stream(axpy):
    side = torch.flagos.Stream()
    x = torch.ones(4096, device="flagos")
    with torch.flagos.stream(side):
        y = torch.full((4096,), 3.0, device="flagos")  # queued on the side stream
        out = _launch(axpy, x, y, 2.0)
        out.mul_(10)  # after the kernel, on the same stream
    side.synchronize()
    assert torch.equal(out.cpu(), torch.full((4096,), 50.0))


def test_bad_images_and_launches_fail_with_the_hals_reason(image, axpy):
    with pytest.raises(RuntimeError, match="not an ELF shared library"):
        kernels.KernelModule(0, FORMAT, b"\x00not a library" * 4)
    with pytest.raises(RuntimeError, match="not one this HAL loads"):
        kernels.KernelModule(0, "cubin", image)
    with pytest.raises(RuntimeError, match="no kernel 'nope'"):
        kernels.KernelModule(0, FORMAT, image).kernel("nope", ())
    x = torch.ones(8, device="flagos")
    wrong = kernels.Kernel(axpy.module, "axpy", axpy.handle, ("*fp32", "*fp32", "*fp32"))
    with pytest.raises(RuntimeError, match="takes 5 arguments, 3 given"):
        wrong.launch((1,), (8,), x, x, x)
    with pytest.raises(RuntimeError, match="dimension must be at least 1"):
        axpy.launch((1,), (0,), x, x, x, 1.0, 8)
    with pytest.raises(RuntimeError, match="a kernel of 5 arguments was given 6"):
        axpy.launch((1,), (8,), x, x, x, 1.0, 8, 99)  # one more than its signature
    # nothing was written, the device is usable
    assert torch.equal(x.cpu(), torch.ones(8))


def test_failed_loads_and_launches_leave_the_device_usable(image, axpy):
    """The HAL's kernel calls failing (fault injection of the kit, as a chip's runtime
    refusing a load or a launch): a Python error with the HAL's text, the output untouched,
    and the next load and launch work."""
    import flagos_hal
    from flagos_hal.fault_control import FaultControl

    ctl = FaultControl(flagos_hal.load(torch.flagos.get_device_properties(0).hal_path))
    x, y = torch.randn(256), torch.randn(256)
    out = torch.full((256,), 7.0, device="flagos")
    try:
        ctl.arm("launch_kernel:1")
        with pytest.raises(RuntimeError, match=r"launch_kernel: injected fault"):
            axpy.launch(((256 + BLOCK - 1) // BLOCK,), (BLOCK,), x.to("flagos"), y.to("flagos"),
                        out, 2.0, 256)
        assert torch.equal(out.cpu(), torch.full((256,), 7.0))
        ctl.arm("module_load:1")
        with pytest.raises(torch.OutOfMemoryError, match=r"module_load: injected fault"):
            kernels.KernelModule(0, FORMAT, image)
    finally:
        ctl.disarm()
    again = kernels.KernelModule(0, FORMAT, image).kernel("axpy", SIGNATURE)
    torch.testing.assert_close(_launch(again, x.to("flagos"), y.to("flagos"), 2.0).cpu(), 2.0 * x + y)


@pytest.fixture(scope="module")
def axpy_op(axpy):
    """flagos_test::axpy, a launch-cached op whose kernel is one launch of axpy."""
    lib = torch.library.Library("flagos_test_hal_kernels", "DEF")
    lib.define("axpy(Tensor x, Tensor y, float alpha) -> Tensor")
    calls = []

    def kernel(x, y, alpha):
        calls.append(alpha)
        return _launch(axpy, x, y, alpha)

    launch_cache.register("flagos_test_hal_kernels::axpy", "flagos", kernel)
    yield torch.ops.flagos_test_hal_kernels.axpy, calls
    lib._destroy()


def test_the_launch_cache_relaunches_hal_kernels_from_cpp(axpy_op):
    op, calls = axpy_op
    x, y = torch.randn(300), torch.randn(300)
    fx, fy = x.to("flagos"), y.to("flagos")
    before = launch_cache.stats()
    first = op(fx, fy, 0.5)
    second = op(fx, fy, 0.5)  # same metadata: relaunched from C++, no Python
    third = op(fy, fx, 0.5)   # other tensors of the same metadata: relaunched on them
    other = op(fx, fy, 3.0)   # another alpha: another key, Python again
    after = launch_cache.stats()
    assert calls == [0.5, 3.0]
    assert after["relaunched"] - before["relaunched"] == 2 and after["kept"] - before["kept"] == 2
    for got, want in ((first, 0.5 * x + y), (second, 0.5 * x + y), (third, 0.5 * y + x),
                      (other, 3.0 * x + y)):
        torch.testing.assert_close(got.cpu(), want)
    assert first.data_ptr() != second.data_ptr()  # fresh results on every call
    with launch_cache.disabled():
        op(fx, fy, 0.5)
    assert calls == [0.5, 3.0, 0.5]


@pytest.fixture(scope="module")
def axpy_twice_op(axpy):
    """A launch-cached op of two launches through a temporary in flagos memory:
    tmp = alpha * x + y, then out = alpha * tmp + y."""
    lib = torch.library.Library("flagos_test_hal_kernels_twice", "DEF")
    lib.define("axpy_twice(Tensor x, Tensor y, float alpha) -> Tensor")
    calls = []

    def kernel(x, y, alpha):
        calls.append(alpha)
        spare = torch.empty(3, device=x.device)  # allocated and freed before any launch
        del spare
        tmp = torch.empty(x.numel() + 8, device=x.device)[4:4 + x.numel()]  # inside its block
        return _launch(axpy, _launch(axpy, x, y, alpha, out=tmp), y, alpha)

    launch_cache.register("flagos_test_hal_kernels_twice::axpy_twice", "flagos", kernel)
    yield torch.ops.flagos_test_hal_kernels_twice.axpy_twice, calls
    lib._destroy()


@contextlib.contextmanager
def _launch_cached(namespace: str, kernel):
    """``namespace::op(Tensor x, Tensor y, float alpha)``, its kernel launch-cached on flagos."""
    lib = torch.library.Library(namespace, "DEF")
    lib.define("op(Tensor x, Tensor y, float alpha) -> Tensor")
    launch_cache.register(f"{namespace}::op", "flagos", kernel)
    try:
        yield getattr(torch.ops, namespace).op
    finally:
        lib._destroy()


def _never_kept(op, alpha: float, expected) -> None:
    """Calls of one key all run the Python kernel and give ``expected(x, y)``."""
    before = launch_cache.stats()
    for _ in range(2):
        x, y = torch.randn(64), torch.randn(64)
        torch.testing.assert_close(op(x.to("flagos"), y.to("flagos"), alpha).cpu(), expected(x, y))
    after = launch_cache.stats()
    assert after["kept"] == before["kept"] and after["python"] - before["python"] == 2


def test_a_temporary_computed_by_an_aten_op_is_not_kept(axpy):
    # Its values come from device work a relaunch would not do: the call stays in Python.
    with _launch_cached("flagos_test_hal_kernels_computed",
                        lambda x, y, alpha: _launch(axpy, x * 2, y, alpha)) as op:
        _never_kept(op, 0.5, lambda x, y: x + y)


def test_the_launch_cache_relaunches_launches_through_temporaries(axpy_twice_op):
    op, calls = axpy_twice_op
    before = launch_cache.stats()
    for _ in range(3):
        x, y = torch.randn(300), torch.randn(300)
        got = op(x.to("flagos"), y.to("flagos"), 2.0)
        torch.testing.assert_close(got.cpu(), 2.0 * (2.0 * x + y) + y)
    after = launch_cache.stats()
    assert calls == [2.0]
    assert after["relaunched"] - before["relaunched"] == 2 and after["kept"] - before["kept"] == 1
    allocated = torch.flagos.memory_allocated()
    op(torch.ones(300, device="flagos"), torch.ones(300, device="flagos"), 1.0)  # Python
    op(torch.ones(300, device="flagos"), torch.ones(300, device="flagos"), 1.0)  # C++
    assert torch.flagos.memory_allocated() == allocated  # the temporaries went back


# ---- Triton's driver for flagos devices (flagos.triton_driver) --------------------------

class _Source:
    """What Triton hands a launcher of a compiled kernel: its signature (constexpr kept)."""

    def __init__(self) -> None:
        self.signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "alpha": "fp32", "n": "i64",
                          "BLOCK": "constexpr"}
        self.constants: dict = {}


class _Metadata:
    num_warps, shared, num_ctas = 4, 0, 1
    launch_cooperative_grid = launch_pdl = False


class _TargetMetadata(_Metadata):
    """A kernel compiled for a target of a known warp size (the sim's is 1 thread): its
    launcher converts parameters in C++ (flagos._C._TypedLauncher)."""
    target = types.SimpleNamespace(backend="", arch="", warp_size=1)


@pytest.fixture(params=[_Metadata, _TargetMetadata], ids=["packed", "typed"])
def metadata(request):
    return request.param


def test_no_triton_backend_compiles_for_sim():
    triton_driver = pytest.importorskip("flagos.triton_driver")
    with pytest.raises(RuntimeError, match="no Triton backend compiles for flagos:0"):
        triton_driver.target(0)


def test_the_triton_driver_loads_and_launches_through_the_hal(image, metadata):
    triton_driver = pytest.importorskip("flagos.triton_driver")
    driver = triton_driver.HalDriver()
    _, function, _, _, max_threads = driver.utils.load_binary("axpy", image, 0, 0)
    assert max_threads == kernels.target(0).max_threads_per_block
    launcher = driver.launcher_cls(_Source(), metadata())
    assert (launcher.typed is None) == (metadata is _Metadata)
    x, y = torch.randn(999), torch.randn(999)
    fx, fy = x.to("flagos"), y.to("flagos")
    out = torch.empty_like(fx)
    # the sim's warp is 1 thread: 4 warps are a block of 4, each program 4 elements
    launcher((999 + 3) // 4, 1, 1, driver.get_current_stream(0), function, None, None, None, None,
             fx, fy, out, -1.5, 999, 4)
    torch.testing.assert_close(out.cpu(), -1.5 * x + y)
    assert driver.get_active_torch_device() == torch.device("flagos", 0)
    # Triton's launch hooks run around the launch, given its launch metadata
    seen = []
    launcher((999 + 3) // 4, 1, 1, driver.get_current_stream(0), function, None, "meta",
             lambda m: seen.append(("enter", m, out.clone().cpu())),
             lambda m: seen.append(("exit", m)), fx, fy, out, 2.0, 999, 4)
    assert [s[:2] for s in seen] == [("enter", "meta"), ("exit", "meta")]
    torch.testing.assert_close(seen[0][2], -1.5 * x + y)  # before the launch
    torch.testing.assert_close(out.cpu(), 2.0 * x + y)
    # a kernel of a release whose launchers add scratch pointers gets them (the sim kernel
    # declares five parameters, so the HAL refuses the seven)
    class Scratch(metadata):
        global_scratch_size = profile_scratch_size = 0
        global_scratch_align = profile_scratch_align = 1
    with pytest.raises(RuntimeError, match="takes 5 arguments, 7 given"):
        driver.launcher_cls(_Source(), Scratch())(1, 1, 1, 0, function, None, None, None, None,
                                                   fx, fy, out, 1.0, 999, 4)
    class Clusters(metadata):
        num_ctas = 2
    with pytest.raises(NotImplementedError, match="num_ctas=2"):
        driver.launcher_cls(_Source(), Clusters())


def test_the_triton_driver_is_active_inside_its_block():
    triton_driver = pytest.importorskip("flagos.triton_driver")
    import triton

    before = triton.runtime.driver._active
    with triton_driver.active() as driver:
        assert triton.runtime.driver.active is driver
    assert triton.runtime.driver._active is before


def test_triton_launches_are_kept_by_the_launch_cache(image, metadata):
    triton_driver = pytest.importorskip("flagos.triton_driver")
    driver = triton_driver.HalDriver()
    _, function, _, _, _ = driver.utils.load_binary("axpy", image, 0, 0)
    launcher = driver.launcher_cls(_Source(), metadata())
    assert (launcher.typed is None) == (metadata is _Metadata)
    ns = f"flagos_test_triton_driver_{metadata.__name__.lower()}"
    lib = torch.library.Library(ns, "DEF")
    lib.define("axpy(Tensor x, Tensor y, float alpha) -> Tensor")
    calls = []

    def kernel(x, y, alpha):
        calls.append(alpha)
        out = torch.empty_like(x)
        launcher((x.numel() + 3) // 4, 1, 1, 0, function, None, None, None, None, x, y, out, alpha,
                 x.numel(), 4)
        return out

    launch_cache.register(f"{ns}::axpy", "flagos", kernel)
    try:
        x, y = torch.randn(50), torch.randn(50)
        op = getattr(torch.ops, ns).axpy
        got = [op(x.to("flagos"), y.to("flagos"), 2.0).cpu() for _ in range(3)]
        assert calls == [2.0]
        for g in got:
            torch.testing.assert_close(g, 2.0 * x + y)
    finally:
        lib._destroy()


def test_a_launch_on_another_stream_runs_there_and_is_not_kept(image, metadata):
    triton_driver = pytest.importorskip("flagos.triton_driver")
    driver = triton_driver.HalDriver()
    _, function, _, _, _ = driver.utils.load_binary("axpy", image, 0, 0)
    launcher = driver.launcher_cls(_Source(), metadata())
    assert (launcher.typed is None) == (metadata is _Metadata)
    side = torch.flagos.Stream()
    ns = f"flagos_test_triton_side_{metadata.__name__.lower()}"
    lib = torch.library.Library(ns, "DEF")
    lib.define("axpy(Tensor x, Tensor y) -> Tensor")
    calls = []

    def kernel(x, y):
        calls.append(1)
        out = torch.empty_like(x)
        side.wait_stream(torch.flagos.current_stream())
        launcher((x.numel() + 3) // 4, 1, 1, side.stream_id, function, None, None, None, None,
                 x, y, out, 1.0, x.numel(), 4)
        torch.flagos.current_stream().wait_stream(side)
        return out

    launch_cache.register(f"{ns}::axpy", "flagos", kernel)
    try:
        x, y = torch.randn(40), torch.randn(40)
        op = getattr(torch.ops, ns).axpy
        got = [op(x.to("flagos"), y.to("flagos")).cpu() for _ in range(2)]
        assert calls == [1, 1]  # a relaunch would run on the current stream: not kept
        for g in got:
            torch.testing.assert_close(g, x + y)
    finally:
        lib._destroy()


def test_without_a_twin():
    if os.environ.get("FLAGOS_NO_TWIN") == "1":
        pytest.skip("this is the child")
    env = dict(os.environ, FLAGOS_NO_TWIN="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                       env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]


def _assert_kept_once_relaunched_twice(before: dict) -> None:
    after = launch_cache.stats()
    assert after["relaunched"] - before["relaunched"] == 2
    assert after["kept"] - before["kept"] == 1


class _AxpyProvider(flagos.routing.Provider):
    """A Python provider of a test op on flagos tensors (alpha * x + y, one axpy launch
    through the HAL), declared replayable; float32 only, other calls declined."""

    name = "hal_kernels_axpy_provider"
    replayable_ops = frozenset({"flagos_test_replayed::axpy"})

    def __init__(self, kernel) -> None:
        super().__init__()
        self.kernel, self.calls = kernel, 0

    def serves(self, op: str) -> bool:
        return op in self.replayable_ops

    def __call__(self, op, args, kwargs):
        self.calls += 1
        x, y, alpha = args
        if not x.dtype == y.dtype == torch.float32:
            return NotImplemented
        return _launch(self.kernel, x, y, alpha)


def test_a_replayable_python_providers_calls_are_relaunched_from_cpp(axpy):
    lib = torch.library.Library("flagos_test_replayed", "DEF")
    lib.define("axpy(Tensor x, Tensor y, float alpha) -> Tensor")
    lib.impl("axpy", lambda x, y, alpha: alpha * x + y, "CPU")  # what the CPU fallback runs
    provider = _AxpyProvider(axpy)
    flagos.routing.register_provider(provider)
    op = torch.ops.flagos_test_replayed.axpy
    before = launch_cache.stats()
    try:
        with flagos.routing.override({"flagos_test_replayed::axpy": [provider.name]}):
            flagos.routing.reset_stats()
            for _ in range(3):
                x, y = torch.randn(200), torch.randn(200)
                torch.testing.assert_close(op(x.to("flagos"), y.to("flagos"), 0.5).cpu(),
                                           0.5 * x + y)
            assert provider.calls == 1  # the other two from C++, without Python
            h = torch.randn(200, dtype=torch.float64)
            for _ in range(2):  # declined: the next provider serves them, nothing is kept
                torch.testing.assert_close(op(h.to("flagos"), h.to("flagos"), 2.0).cpu(), 3 * h)
            assert provider.calls == 3
            stats = flagos.routing.stats()["flagos_test_replayed::axpy"][provider.name]
        assert stats["calls"] == 3 and stats["declined"] == 2
        _assert_kept_once_relaunched_twice(before)
    finally:
        flagos.routing.reset()
        lib._destroy()


class _AxpyLibrary(flagos.routing.Provider):
    """How a kernel library's provider describes itself (its kernels run in the foreign
    engine): serves one test op."""

    name = "hal_kernels_axpy_library"
    is_cpp = True

    def serves(self, op: str) -> bool:
        return op == "flagos_test_library::axpy"


def test_a_kernel_librarys_replayable_calls_are_relaunched_without_a_twin(axpy):
    # Without a twin a kernel library's kernel gets the flagos tensors and launches through
    # the HAL; where its provider declared the op replayable, the calls after the first with
    # a key are relaunched from C++.
    if torch.flagos.get_device_properties(0).twin_device != "none":
        pytest.skip("a kernel library's kernels take flagos tensors without a twin")
    from flagos import provider_api

    lib = torch.library.Library("flagos_test_library", "DEF")
    lib.define("axpy(Tensor x, Tensor y, float alpha) -> Tensor")
    lib.impl("axpy", lambda x, y, alpha: alpha * x + y, "CPU")
    calls = []

    def kernel(x, y, alpha):
        calls.append(x.device.type)
        if x.dtype != torch.float32:
            return NotImplemented
        return _launch(axpy, x, y, alpha)

    provider = _AxpyLibrary()
    provider_api.register_foreign_provider(provider.name, {
        "flagos_test_library::axpy": launch_cache.watched(kernel)}.get)
    flagos.routing.register_provider(provider)
    provider_api.set_replayable(provider.name, ["flagos_test_library::axpy"])
    op = torch.ops.flagos_test_library.axpy
    before = launch_cache.stats()
    try:
        with flagos.routing.override({"flagos_test_library::axpy": [provider.name]}):
            for _ in range(3):
                x, y = torch.randn(100), torch.randn(100)
                torch.testing.assert_close(op(x.to("flagos"), y.to("flagos"), 2.0).cpu(),
                                           2 * x + y)
            assert calls == ["flagos"]  # the other two from C++
            h = torch.randn(10, dtype=torch.float64)
            torch.testing.assert_close(op(h.to("flagos"), h.to("flagos"), 1.0).cpu(), 2 * h)
        _assert_kept_once_relaunched_twice(before)
    finally:
        flagos.routing.reset()
        lib._destroy()


class _BelowModesProvider(_AxpyProvider):
    """A provider whose kernel makes its input contiguous, or fills a buffer it then reads,
    where Python's dispatch modes do not see it (as a C++ kernel would)."""

    def __init__(self, kernel, work: str) -> None:
        super().__init__(kernel)
        self.name = f"hal_kernels_below_modes_{work}"
        self.replayable_ops = frozenset({f"flagos_test_below_modes_{work}::axpy"})
        self.work = work

    def __call__(self, op, args, kwargs):
        self.calls += 1
        x, y, alpha = args
        with torch._C._DisableTorchDispatch():
            if self.work == "copy":
                x = x.contiguous()
            elif self.work == "fast":  # a hot op's fast kernel on the CPU twin
                y = torch.ops.aten.mul.Tensor(y, 2.0)
            elif self.work == "routed":  # a routed op the CPU fallback computes
                y = torch.ops.aten.sin(y)
            elif self.work == "foreign":  # a kernel library's kernel, on the twin
                y = torch.ops.flagos_test_below_modes_library.double(y)
            else:
                y = torch.empty(x.shape, device=x.device)
                y.fill_(1.0) if self.work == "fill" else y.zero_()
        return _launch(self.kernel, x, y, alpha)


@pytest.fixture
def doubling_library():
    """flagos_test_below_modes_library::double (2 * y), served by a kernel library's provider;
    on a device with a twin its kernel runs on the twin's aliases."""
    from flagos import provider_api

    lib = torch.library.Library("flagos_test_below_modes_library", "DEF")
    lib.define("double(Tensor y) -> Tensor")
    lib.impl("double", lambda y: 2 * y, "CPU")
    provider = type("DoublingLibrary", (_AxpyLibrary,), {
        "name": "hal_kernels_doubling_library",
        "serves": lambda self, op: op == "flagos_test_below_modes_library::double"})()
    provider_api.register_foreign_provider(provider.name, {
        "flagos_test_below_modes_library::double": lambda y: 2 * y}.get)
    flagos.routing.register_provider(provider)
    yield provider.name
    lib._destroy()


@pytest.mark.parametrize("work", ["copy", "fill", "zero", "fast", "routed", "foreign"])
def test_device_work_below_pythons_dispatch_modes_is_not_kept(axpy, doubling_library, work):
    # The launch reads a temporary that only the copy, fill or routed op wrote: a relaunch
    # (a fresh temporary, no copy) would read garbage. The runtime's own copy and fill
    # kernels, and a routed op computed otherwise than by a HAL launch, spoil the
    # recording, however the kernel reached them.
    ns = f"flagos_test_below_modes_{work}"
    lib = torch.library.Library(ns, "DEF")
    lib.define("axpy(Tensor x, Tensor y, float alpha) -> Tensor")
    lib.impl("axpy", lambda x, y, alpha: alpha * x + y, "CPU")
    provider = _BelowModesProvider(axpy, work)
    flagos.routing.register_provider(provider)
    op = getattr(torch.ops, ns).axpy
    before = launch_cache.stats()
    try:
        with flagos.routing.override({f"{ns}::axpy": [provider.name],
                                      "aten::mul.Tensor": ["cpu"], "aten::sin": ["cpu"],
                                      "flagos_test_below_modes_library::double":
                                          [doubling_library, "cpu"]}):
            for _ in range(3):
                x, y = torch.randn(10, 6), torch.randn(6, 10)
                want = 2 * x.mT + {"copy": y, "fast": 2 * y, "routed": y.sin(), "foreign": 2 * y,
                                   "fill": 1.0, "zero": 0.0}[work]
                xf = x.to("flagos").mT  # read in storage order: right where y is constant
                xf = xf.contiguous() if work in ("fast", "routed", "foreign") else xf
                torch.testing.assert_close(op(xf, y.to("flagos"), 2.0).cpu(), want)
        after = launch_cache.stats()
        assert provider.calls == 3  # each call through Python
        assert after["kept"] == before["kept"] and after["python"] == before["python"] + 3
    finally:
        flagos.routing.reset()
        lib._destroy()


TRITON_WITHOUT_A_BACKEND_DEVICE = '''
import pathlib, sys, tempfile, textwrap
import torch, flagos
import triton
from flagos import triton_driver
assert isinstance(triton.runtime.driver.active, triton_driver.HalDriver)
src = pathlib.Path(tempfile.mkdtemp()) / "kernel.py"  # Triton reads a kernel's source file
src.write_text(textwrap.dedent(\"\"\"
    import triton, triton.language as tl
    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i) + 1, mask=i < n)
\"\"\"))
sys.path.insert(0, str(src.parent))
import kernel
x = torch.ones(8, device="flagos")
try:
    kernel.add_one[(1,)](x, 8, BLOCK=8)
except RuntimeError as e:
    assert "no Triton backend compiles for flagos:0 (HAL 'sim'" in str(e), e
else:
    raise AssertionError("sim has no Triton backend; the launch should have failed")
assert torch.equal(x.cpu(), torch.ones(8))
print("ok")
'''


def test_triton_without_a_device_of_its_own_takes_the_hal_driver(run_python):
    # No Triton backend is active on this machine (no GPU): importing Triton with flagos
    # makes the HAL driver Triton's, and a kernel fails naming the HAL, not "0 drivers".
    pytest.importorskip("triton")
    from triton.backends import backends

    if any(b.driver.is_active() for b in backends.values()):
        pytest.skip("a Triton backend has a device of its own here (a GPU): Triton keeps it")
    r = run_python(TRITON_WITHOUT_A_BACKEND_DEVICE, check=False)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-3000:])


def test_triton_first_imported_by_the_hal_driver_module_takes_it(run_python):
    # flagos.triton_driver imports Triton itself: the HAL driver still becomes Triton's,
    # without a warning about a half-imported module.
    pytest.importorskip("triton")
    from triton.backends import backends

    if any(b.driver.is_active() for b in backends.values()):
        pytest.skip("a Triton backend has a device of its own here (a GPU): Triton keeps it")
    code = """
import warnings
warnings.simplefilter("error")
import torch, flagos
from flagos import triton_driver
import triton
assert isinstance(triton.runtime.driver.active, triton_driver.HalDriver)
print("ok")
"""
    r = run_python(code, check=False)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-3000:])


def test_a_block_on_another_device_is_no_temporary(axpy, two_devices):
    # A relaunch would make it on the results' device: the call is not kept.
    def kernel(x, y, alpha):
        tmp = torch.empty(x.numel(), device="flagos:1")  # sim memory: device 0 reaches it
        out = torch.empty_like(x)  # on x's device, whose stream runs both launches
        return _launch(axpy, _launch(axpy, x, y, alpha, out=tmp), y, alpha, out=out)

    with _launch_cached("flagos_test_hal_kernels_elsewhere", kernel) as op:
        _never_kept(op, 2.0, lambda x, y: 2.0 * (2.0 * x + y) + y)
