"""The boxing provider: what it serves, and that it runs ops zero-copy on the twin."""

from __future__ import annotations

import os

import flagos
import flagos_ops_boxing as boxing
import pytest
import torch

sim_only = pytest.mark.skipif(os.environ.get("FLAGOS_TEST_HW", "sim") != "sim",
                              reason="sim-specific coverage numbers")


@sim_only
def test_coverage_comes_from_the_operator_registry() -> None:
    ops = boxing.coverage("sim")
    assert len(ops) > 900  # every routed aten overload with a CPU kernel
    assert "aten::mm.out" in ops and "aten::add.out" in ops
    # ops with a flagos runtime kernel never reach a provider, so they are not counted
    assert "aten::empty.memory_format" not in ops and "aten::copy_" not in ops
    assert all(torch._C._dispatch_has_kernel_for_dispatch_key(o, "CPU") for o in ops[:50])


@sim_only
def test_serves_on_follows_the_twin_of_the_hal() -> None:
    p = flagos.routing.providers()["boxing"]
    assert isinstance(p, boxing.BoxingProvider) and p.is_cpp
    assert p.serves_on("aten::mm.out", "sim")
    assert not p.serves_on("aten::mm.out", "no-such-hal")
    # an op with no CPU kernel (CUDA-only) is not served on sim
    cuda_only = next(n for n in torch._C._dispatch_get_all_op_names()
                     if n.startswith("aten::_cudnn")
                     and not torch._C._dispatch_has_kernel_for_dispatch_key(n, "CPU"))
    assert not p.serves_on(cuda_only, "sim")


def test_routes_through_boxing_and_matches_cpu() -> None:
    flagos.routing.reset_stats()
    a = torch.randn(8, 8)
    b = torch.randn(8, 8)
    with flagos.routing.override({"default": ["boxing"]}):
        got = (a.to("flagos") @ b.to("flagos")).relu()
    torch.testing.assert_close(got.cpu(), (a @ b).relu())
    stats = flagos.routing.stats()
    # mm arrives functional on a CPU twin (core's fast kernels), as mm.out on a device twin
    mm = [stats[k] for k in ("aten::mm", "aten::mm.out") if k in stats]
    assert sum(s["boxing"]["calls"] for s in mm) == 1
    assert not any("cpu" in s for s in mm)


def test_in_place_result_is_the_callers_tensor_and_shares_memory() -> None:
    x = torch.ones(4, device="flagos")
    view = x[1:3]
    with flagos.routing.override({"default": ["boxing"]}):
        out = view.mul_(3)
    assert out is view
    assert x.cpu().tolist() == [1.0, 3.0, 3.0, 1.0]


def test_convolutions_run_on_the_twin_forward_and_backward() -> None:
    # PrivateUse1 receives the convolution_overrideable hooks; boxing serves them (the
    # engine runs aten::convolution on the twin) instead of leaving them to the CPU fallback,
    # which on a device twin would stage every convolution through host memory.
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    fconv = torch.nn.Conv2d(3, 4, 3, padding=1).to("flagos")
    fconv.load_state_dict(conv.state_dict())
    fx = x.detach().to("flagos").requires_grad_(True)
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["boxing"]}):
        fconv(fx).sum().backward()
    conv(x).sum().backward()
    torch.testing.assert_close(fx.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    stats = flagos.routing.stats()
    for hook in ("aten::convolution_overrideable", "aten::convolution_backward_overrideable"):
        assert set(stats[hook]) == {"boxing"}, stats[hook]


def test_no_twin_mode_skips_boxing_with_the_reason() -> None:
    # FLAGOS_NO_TWIN=1 (read when flagos loads): no device has a twin, so boxing is not
    # available on any HAL, and explain says why instead of "does not serve".
    import subprocess
    import sys

    code = ("import torch, flagos\n"
            "hal = torch.flagos.get_device_properties(0).hal\n"
            "assert torch.flagos.get_device_properties(0).twin_device == 'none'\n"
            "print(flagos.routing.explain('aten::mm.out').devices[0])\n"
            "x = torch.ones(2, 3, device='flagos')\n"
            "assert torch.equal((x @ x.T).cpu(), torch.full((2, 2), 3.0))\n")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, FLAGOS_NO_TWIN="1"),
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "- boxing: skipped, not available on HAL" in r.stdout, r.stdout
    assert "its devices have no twin device (opaque memory, or FLAGOS_NO_TWIN=1)" in r.stdout
    assert "served by: boxing" not in r.stdout
