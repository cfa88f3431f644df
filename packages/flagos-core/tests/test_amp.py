"""torch.autocast("flagos") with the standard op policy."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_policy(dtype):
    a = torch.randn(8, 8, device="flagos")
    lin = torch.nn.Linear(8, 8).to("flagos")
    with torch.autocast("flagos", dtype=dtype):
        assert torch.is_autocast_enabled("flagos")
        assert torch.get_autocast_dtype("flagos") == dtype
        assert torch.mm(a, a).dtype == dtype  # lower precision list
        assert (a @ a).dtype == dtype
        assert lin(a).dtype == dtype
        assert torch.softmax(a, 0).dtype == torch.float32  # fp32 list
        assert torch.softmax(a.to(dtype), 0).dtype == torch.float32
        assert torch.exp(a.to(dtype)).dtype == torch.float32
        assert (a + a).dtype == torch.float32  # not listed: unchanged
        assert torch.addcmul(a, a.to(dtype), a).dtype == torch.float32  # promote
    assert not torch.is_autocast_enabled("flagos")
    assert torch.mm(a, a).dtype == torch.float32
    with torch.autocast("flagos", dtype=dtype):
        ref = torch.mm(a, a)
    torch.testing.assert_close(ref.float().cpu(), a.cpu() @ a.cpu(), atol=0.3, rtol=0.05)


def test_autocast_backward():
    lin = torch.nn.Linear(8, 4).to("flagos")
    x = torch.randn(3, 8, device="flagos")
    with torch.autocast("flagos", dtype=torch.bfloat16):
        loss = lin(x).float().sum()
    loss.backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == torch.float32


def test_autocast_leaves_cpu_alone():
    c = torch.randn(4, 4)
    with torch.autocast("flagos", dtype=torch.bfloat16):
        assert torch.mm(c, c).dtype == torch.float32
