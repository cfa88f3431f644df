"""Convolutions on flagos return the strides torch's fake kernel predicts for them, so that
Inductor may keep its layout optimization (channels_last activations) on flagos graphs.

Without this the twin's kernel (mkldnn) returned channels_last where the fake kernel of a
PrivateUse1 convolution predicts a contiguous result, and compiled graphs failed their
stride assertions; flagos_compile used to switch the layout optimization off for them.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import assert_close
from flagos_compile.models import ConvNet
from torch._subclasses.fake_tensor import FakeTensorMode

CL = torch.channels_last


def _fake(fn, *tensors):
    with FakeTensorMode() as mode:
        return fn(*(mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in tensors))


def _strides(out):
    """Strides as Inductor's assert_size_stride compares them: those of size-1 dims are
    ignored (any value is the same layout)."""
    def of(t):
        if t is None:
            return None
        return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))
    if isinstance(out, torch.Tensor):
        return [of(out)]
    return [of(t) for t in out]


def _conv(x, w, b, stride, padding, transposed=False):
    n = w.dim() - 2
    return torch.ops.aten.convolution(x, w, b, [stride] * n, [padding] * n, [1] * n,
                                      transposed, [0] * n, 1)


def _conv_bw(go, x, w, stride, padding, transposed=False):
    n = w.dim() - 2
    return torch.ops.aten.convolution_backward(go, x, w, [w.shape[1 if transposed else 0]],
                                               [stride] * n, [padding] * n, [1] * n,
                                               transposed, [0] * n, 1, [True, True, True])


CASES = {
    # name: (input shape, weight shape, input format, weight format, transposed)
    "2d": ((2, 3, 8, 8), (4, 3, 3, 3), None, None, False),
    "2d-cl-input": ((2, 3, 8, 8), (4, 3, 3, 3), CL, None, False),
    "2d-cl-weight": ((2, 3, 8, 8), (4, 3, 3, 3), None, CL, False),
    "2d-cl-both": ((2, 3, 8, 8), (4, 3, 3, 3), CL, CL, False),
    "2d-one-channel": ((2, 1, 5, 5), (1, 1, 3, 3), CL, CL, False),
    "transposed-cl": ((2, 3, 6, 6), (3, 4, 3, 3), CL, CL, True),
    "1d": ((2, 3, 9), (4, 3, 3), None, None, False),
    "3d-cl": ((1, 2, 4, 4, 4), (3, 2, 2, 2, 2), torch.channels_last_3d, None, False),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("case", list(CASES))
def test_eager_convolution_strides_match_the_fake_kernel(case: str, bias: bool) -> None:
    xs, ws, xf, wf, transposed = CASES[case]
    x, w = torch.randn(xs), torch.randn(ws)
    if xf is not None:
        x = x.to(memory_format=xf)
    if wf is not None:
        w = w.to(memory_format=wf)
    # Without bias: what Inductor's extern convolutions pass (bias=None), and what reaches
    # the overrideable hook as an undefined tensor.
    b = torch.randn(ws[1] if transposed else ws[0]) if bias else None
    fx, fw = x.to("flagos"), w.to("flagos")
    fb = b.to("flagos") if bias else None

    out = _conv(fx, fw, fb, 1, 1, transposed)
    assert _strides(out) == _strides(_fake(_conv, fx, fw, fb, 1, 1, transposed))
    assert_close(out, _conv(x, w, b, 1, 1, transposed), rtol=1e-5, atol=1e-5)

    go = torch.randn(out.shape)
    if xf is not None:
        go = go.to(memory_format=xf)
    fgo = go.to("flagos")
    grads = _conv_bw(fgo, fx, fw, 1, 1, transposed)
    assert _strides(grads) == _strides(_fake(_conv_bw, fgo, fx, fw, 1, 1, transposed))
    for g, r in zip(grads, _conv_bw(go, x, w, 1, 1, transposed), strict=True):
        assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_layout_optimization_applies_to_flagos_graphs() -> None:
    """With the layout optimization forced on (what Inductor does for mkldnn CPUs), a conv
    net on flagos compiles, trains and matches eager: its conv inputs go channels_last."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    model = ConvNet()
    x = torch.randn(2, 3, 16, 16)
    compiled = torch.compile(copy.deepcopy(model).to("flagos"))
    ref = model(x)
    ref.pow(2).mean().backward()

    def step() -> torch.Tensor:
        out = compiled(x.to("flagos"))
        out.pow(2).mean().backward()
        return out

    with config.patch(force_layout_optimization=True):
        out, codes = run_and_get_code(step)
    # the first conv's input, (2, 3, 16, 16) channels_last
    assert any("(768, 1, 48, 3)" in code for code in codes)
    assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for p, r in zip(compiled.parameters(), model.parameters(), strict=True):
        assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)
