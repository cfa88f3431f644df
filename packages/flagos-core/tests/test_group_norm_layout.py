"""group_norm of a channels_last input (what Diffusers' UNets feed it after a convolution
that keeps the CPU's channels_last layout): torch's composite hands PrivateUse1 the input
in its own layout, so flagos must not take the math version that views it as contiguous."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_group_norm_matches_cpu(layout):
    torch.manual_seed(0)
    x = torch.randn(2, 16, 5, 6).contiguous(memory_format=layout)
    w, b = torch.randn(16), torch.randn(16)
    grad = torch.randn(2, 16, 5, 6)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    want = F.group_norm(*leaves[:1], 4, *leaves[1:], eps=1e-5)
    want.backward(grad)
    fl = [t.detach().to("flagos").requires_grad_() for t in leaves]
    got = F.group_norm(fl[0], 4, fl[1], fl[2], eps=1e-5)
    got.backward(grad.to("flagos"))
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    for f, c in zip(fl, leaves):
        torch.testing.assert_close(f.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)
    assert x.is_contiguous(memory_format=layout)  # the caller's tensor is untouched
    if torch.flagos.get_device_properties(0).native_device == "cpu":
        assert got.stride() == want.stride()  # the CPU kernel's layout, as natively


def test_group_norm_channels_last_on_opaque_memory(run_python):
    run_python(
        "import torch, torch.nn.functional as F\n"
        "x = torch.randn(2, 8, 4, 4).contiguous(memory_format=torch.channels_last)\n"
        "got = F.group_norm(x.to('flagos'), 2).cpu()\n"
        "torch.testing.assert_close(got, F.group_norm(x, 2))\n",
        env={"FLAGOS_NO_TWIN": "1"})
