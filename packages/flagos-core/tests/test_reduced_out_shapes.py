"""Losses whose generated functional kernel hands the .out overload a result of the reduced
shape (mse_loss, smooth_l1_loss): flagos routes the functional op itself, so no kernel
resizes an out tensor that has elements (deprecated by PyTorch, an error in a future
release; an error here)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

RESIZED_OUT = "An output with one or more elements was resized"


@pytest.mark.parametrize("loss", [F.mse_loss, F.smooth_l1_loss], ids=lambda f: f.__name__)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_never_resizes_an_out_tensor(loss, reduction):
    torch.manual_seed(0)
    a, b = torch.randn(5, 3, requires_grad=True), torch.randn(5, 3)
    fa = a.detach().to("flagos").requires_grad_()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=RESIZED_OUT)
        got = loss(fa, b.to("flagos"), reduction=reduction)
        got.sum().backward()
    want = loss(a, b, reduction=reduction)
    want.sum().backward()
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(fa.grad.cpu(), a.grad)
