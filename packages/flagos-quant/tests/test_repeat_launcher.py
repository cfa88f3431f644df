"""The one-row kernels' launcher: the first call of a launch key goes through Triton, later
calls of the same key straight to the compiled kernel with the arguments in signature
order; anything Triton specializes on starts a new key; launch hooks disable it. Triton's
objects are stand-ins here (the real launch needs a GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from flagos_quant.triton_linear import _NOT_THROUGH_HAL, _RepeatLauncher


class _Compiled:
    function, packed_metadata = "function", "metadata"

    def __init__(self, log: list) -> None:
        self.log = log

    def run(self, *args) -> None:
        self.log.append(("run", args))


class _Jit:
    arg_names = ("x", "N", "BLOCK")

    def __init__(self, log: list) -> None:
        self.log = log

    def __getitem__(self, grid):
        def launch(**kwargs):
            self.log.append(("triton", grid, kwargs))
            return _Compiled(self.log)
        return launch


class _JitWithWarmup(_Jit):
    def warmup(self, grid, **kwargs):
        self.log.append(("warmup", grid, kwargs))
        return _Compiled(self.log)


def _launcher(log: list, hook=None, jit=_Jit) -> _RepeatLauncher:
    # Triton's own knobs' types: its hooks are chains, empty when nothing is registered
    from triton.knobs import HookChain

    enter = HookChain()
    if hook is not None:
        enter.add(hook)
    triton = SimpleNamespace(
        knobs=SimpleNamespace(runtime=SimpleNamespace(launch_enter_hook=enter,
                                                      launch_exit_hook=HookChain(reversed=True),
                                                      debug=False),
                              compilation=SimpleNamespace(instrumentation_mode="")),
        runtime=SimpleNamespace(driver=SimpleNamespace(active=SimpleNamespace(
            get_current_device=lambda: 0, get_current_stream=lambda d: 1234))))
    return _RepeatLauncher(jit(log), triton)


def _args(x: torch.Tensor, n: int = 64) -> dict:
    return {"x": x, "N": n, "BLOCK": 32, "num_warps": 4, "num_stages": 2}


def test_repeated_calls_skip_the_binding() -> None:
    log: list = []
    launch = _launcher(log)
    x, y = torch.zeros(64), torch.ones(64)
    launch((2, 1), _args(x))
    launch((2, 1), _args(y))
    assert [e[0] for e in log] == ["triton", "run"]
    assert log[1][1] == (2, 1, 1, 1234, "function", "metadata", None, None, None, y, 64, 32)


def test_what_triton_specializes_on_starts_a_new_key() -> None:
    log: list = []
    launch = _launcher(log)
    x = torch.zeros(65)
    launch((2, 1), _args(x[:64]))
    launch((2, 1), _args(x[1:]))  # 4-byte aligned only
    launch((2, 1), _args(x.double()[:64]))  # another dtype
    launch((2, 1), _args(x[:64], n=48))  # another value
    launch((2, 1), {**_args(x[:64]), "num_warps": 8})  # another option
    assert [e[0] for e in log] == ["triton"] * 5
    launch((3, 1), _args(torch.zeros(64)))  # the first key again
    assert log[-1][0] == "run" and log[-1][1][:3] == (3, 1, 1)


def test_the_installed_tritons_knobs_allow_the_repeat_launch() -> None:
    import triton
    from flagos_quant.triton_linear import _hooked

    runtime = triton.knobs.runtime
    assert not _hooked(runtime.launch_enter_hook) and not _hooked(runtime.launch_exit_hook)
    assert _hooked(lambda *a: None) and not _hooked(None)
    assert _RepeatLauncher(_Jit([]), triton).usable


def test_launch_hooks_send_every_call_through_triton() -> None:
    log: list = []
    launch = _launcher(log, hook=lambda *a: None)
    x = torch.zeros(64)
    for _ in range(3):
        launch((2, 1), _args(x))
    assert [e[0] for e in log] == ["triton"] * 3


def test_the_wrappers_pass_every_kernel_argument(monkeypatch) -> None:
    """The repeat launch passes the kernel's parameters by position from the wrapper's
    arguments: each of them must be there."""
    import triton
    from flagos_quant import _triton_kernels, triton_linear
    from flagos_quant.quantize import quantize_fp8, quantize_nvfp4

    seen: dict = {}

    def family(name):
        return triton_linear._Family(
            lambda grid, args, record=True: seen.__setitem__(name, args), None, None, False)

    monkeypatch.setattr(triton_linear, "_kernels",
                        lambda: (triton, family("fp8"), family("nvfp4")))
    x = torch.randn(1, 64)
    q, s = quantize_fp8(torch.randn(32, 64))
    triton_linear.fp8_linear(x, q, s.reshape(1, 1), [32, 64], None)
    wq, ws, wg = quantize_nvfp4(torch.randn(32, 64), None, 16)
    triton_linear.nvfp4_linear(x, wq, ws, wg, torch.zeros(32))
    for name, kernel in (("fp8", _triton_kernels.fp8_gemv_kernel),
                         ("nvfp4", _triton_kernels.nvfp4_gemv_kernel)):
        missing = set(kernel.arg_names) - set(seen[name])
        assert not missing, (name, missing)
        assert {"num_warps", "num_stages"} <= set(seen[name])


def test_inside_a_launch_cached_op_launches_go_through_the_hal(monkeypatch) -> None:
    """Inside a launch-cached op (flagos.launch_cache) on a twin, the compiled kernel is
    launched through the HAL, which records it, with the kernel's arguments in signature
    order, also at the first call of a key (compiled by Triton's warmup, not launched);
    with record=False the launch is Triton's."""
    import flagos.triton_driver
    from flagos import launch_cache

    through_hal: list = []

    class _HalCompiled:
        def __init__(self, compiled, device) -> None:
            self.compiled, self.device = compiled, device

        def launch(self, grid, args) -> None:
            through_hal.append((type(self.compiled).__name__, self.device, grid, args))

    monkeypatch.setattr(launch_cache, "recording", lambda: True)
    monkeypatch.setattr(launch_cache, "spoil_recording", lambda why=None: pytest.fail("not kept"))
    devices: list = []
    monkeypatch.setattr(launch_cache, "hal_device_for", lambda device: devices.append(device) or 3)
    monkeypatch.setattr(flagos.triton_driver, "HalCompiled", _HalCompiled)
    log: list = []
    launch = _launcher(log, jit=_JitWithWarmup)
    x, y = torch.zeros(64), torch.ones(64)
    launch((2, 1), _args(x))
    launch((2, 1), _args(y))
    assert [e[0] for e in log] == ["warmup"]  # compiled, never launched by Triton
    assert through_hal == [("_Compiled", 3, (2, 1, 1), [x, 64, 32]),
                           ("_Compiled", 3, (2, 1, 1), [y, 64, 32])]
    launch((2, 1), _args(y), record=False)
    assert [e[0] for e in log] == ["warmup", "run"] and len(through_hal) == 2
    assert devices == [x.device, y.device]  # the flagos device for the call's tensors


def test_a_kernel_the_hal_fails_to_load_is_launched_by_triton_and_not_kept(monkeypatch) -> None:
    import flagos.triton_driver
    from flagos import launch_cache

    spoiled: list = []
    loads: list = []

    def failing(compiled, device):
        loads.append(device)
        raise RuntimeError("flagos: the HAL of flagos:0 loads no cubin")

    monkeypatch.setattr(launch_cache, "recording", lambda: True)
    monkeypatch.setattr(launch_cache, "spoil_recording", lambda why=None: spoiled.append(why))
    monkeypatch.setattr(launch_cache, "hal_device_for", lambda device: 0)
    monkeypatch.setattr(flagos.triton_driver, "HalCompiled", failing)
    log: list = []
    launch = _launcher(log, jit=_JitWithWarmup)
    x = torch.zeros(64)
    launch((2, 1), _args(x))
    launch((2, 1), _args(x))
    assert [e[0] for e in log] == ["warmup", "run", "run"] and spoiled == [_NOT_THROUGH_HAL] * 2
    assert loads == [0, 0]  # a failed load is tried again at the next recorded call


def test_a_first_call_triton_can_only_launch_is_not_kept(monkeypatch) -> None:
    from flagos import launch_cache

    spoiled: list = []
    monkeypatch.setattr(launch_cache, "recording", lambda: True)
    monkeypatch.setattr(launch_cache, "spoil_recording", lambda why=None: spoiled.append(why))
    log: list = []
    _launcher(log)((2, 1), _args(torch.zeros(64)))  # a Triton without warmup
    assert [e[0] for e in log] == ["triton"] and spoiled == [_NOT_THROUGH_HAL]


def test_a_launch_the_hal_cannot_make_is_triton_s_and_not_kept(monkeypatch) -> None:
    """Where no flagos device launches for the call's tensors (a twin stream other than
    the flagos one, say) the launch goes through Triton and the call is not kept."""
    from flagos import launch_cache

    spoiled: list = []
    monkeypatch.setattr(launch_cache, "recording", lambda: True)
    monkeypatch.setattr(launch_cache, "spoil_recording", lambda why=None: spoiled.append(why))
    monkeypatch.setattr(launch_cache, "hal_device_for", lambda device: None)
    log: list = []
    launch = _launcher(log)
    x = torch.zeros(64)
    launch((2, 1), _args(x))
    launch((2, 1), _args(x))
    assert [e[0] for e in log] == ["triton", "run"] and spoiled == [_NOT_THROUGH_HAL] * 2
