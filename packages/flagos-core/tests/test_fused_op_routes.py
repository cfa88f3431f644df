"""rms_norm and scaled_dot_product_attention on flagos (router/fused_ops.cpp): with only
the CPU fallback in the fused ops' routes they decompose as torch does; with one
that declines a call, flagos computes the fused op and its backward from other ops. Both
match the CPU, forward and backward, on every HAL."""

from __future__ import annotations

import flagos
import pytest
import torch
import torch.nn.functional as F
from flagos.routing import Provider

DEV = "flagos"
FUSED = ("aten::_fused_rms_norm", "aten::_fused_rms_norm_backward",
         "aten::_scaled_dot_product_fused_attention_overrideable",
         "aten::_scaled_dot_product_fused_attention_overrideable_backward")


class Decliner(Provider):
    """A kernel provider that names the fused ops and declines every call."""

    def __init__(self) -> None:
        super().__init__("fused_decliner")
        self.calls: list[str] = []

    def serves(self, op: str) -> bool:
        return op in FUSED

    def __call__(self, op, args, kwargs):
        self.calls.append(op.name())
        return NotImplemented


def _grads_match(fn, tensors, tol=(1e-4, 1e-5)):
    dev = [t.detach().to(DEV).requires_grad_() for t in tensors]
    ref = [t.detach().clone().requires_grad_() for t in tensors]
    out, expect = fn(*dev), fn(*ref)
    torch.testing.assert_close(out.cpu(), expect, rtol=tol[0], atol=tol[1])
    g = torch.randn_like(expect)
    out.backward(g.to(DEV))
    expect.backward(g)
    for a, b in zip(dev, ref):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=tol[0] * 10, atol=tol[1] * 10)


def _cases():
    torch.manual_seed(0)
    x, w = torch.randn(3, 4, 16), torch.randn(16)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    mask = torch.randn(5, 7)
    return [
        (lambda x, w: F.rms_norm(x, (16,), w, 1e-6), [x, w]),
        (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), [q, k, v]),
        (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.4,
                                                           enable_gqa=True), [q, k, v, mask]),
        (lambda q, k, v: F.scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5],
                                                        is_causal=True, enable_gqa=True),
         [q, k, v]),
    ]


@pytest.mark.parametrize("case", range(4))
def test_without_kernel_provider_decomposes(case):
    fn, tensors = _cases()[case]
    with flagos.routing.override({op: ["cpu"] for op in FUSED}):
        flagos.routing.reset_stats()
        _grads_match(fn, tensors)
        stats = flagos.routing.stats()
    assert not any(op in stats for op in FUSED), {op: stats[op] for op in FUSED if op in stats}


@pytest.mark.parametrize("case", range(4))
def test_declined_fused_op_is_computed_from_other_ops(case):
    decliner = Decliner()
    flagos.routing.register_provider(decliner)
    fn, tensors = _cases()[case]
    with flagos.routing.override({op: ["fused_decliner"] for op in FUSED}):
        flagos.routing.reset_stats()
        _grads_match(fn, tensors)
        stats = flagos.routing.stats()
    forward, backward = (FUSED[0], FUSED[1]) if case == 0 else (FUSED[2], FUSED[3])
    for op in (forward, backward):
        assert stats[op]["fused_decliner"]["declined"] == 1, stats.get(op)
        assert stats[op]["fused_decliner"]["calls"] == 0
    flagos.routing.reset()


def _needs_device_twin() -> torch.device:
    twin = flagos.twin_device(0)
    if twin is None or twin.type == "cpu":
        pytest.skip("needs a device twin with fused kernels of its own (boxing on the cuda HAL)")
    return twin


def test_a_device_twin_runs_its_own_fused_rms_norm():
    # As on the twin device itself: one fused kernel forward, one backward, not the
    # decomposition (pow, mean, rsqrt, mul).
    _needs_device_twin()
    fn, tensors = _cases()[0]
    with flagos.routing.override({op: ["boxing"] for op in FUSED}):
        flagos.routing.reset_stats()
        _grads_match(fn, tensors)
        stats = flagos.routing.stats()
    for op in FUSED[:2]:
        assert stats[op]["boxing"]["calls"] == 1, stats.get(op)
    assert "aten::rsqrt" not in stats and "aten::rsqrt.out" not in stats


_TWIN_ATTENTION = {  # the backend a device twin chooses -> the ops that run it on flagos
    1: FUSED[2:],  # flash attention, through the overrideable op
    2: ("aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_efficient_attention_backward"),
    3: ("aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_cudnn_attention_backward"),
}


@pytest.mark.parametrize("heads", [4, 2])
def test_a_device_twin_runs_the_attention_kernel_it_would_choose(heads):
    # The backend the twin device would take for these tensors (its _fused_sdp_choice, as
    # torch.nn.functional.scaled_dot_product_attention asks it) runs forward and backward
    # on the twin; math (0) keeps torch's decomposition.
    twin = _needs_device_twin()
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 64, dtype=torch.bfloat16)
    k, v = (torch.randn(2, heads, 16, 64, dtype=torch.bfloat16) for _ in range(2))
    gqa = heads != 4
    on_twin = [t.to(twin).requires_grad_() for t in (q, k, v)]
    choice = int(torch.ops.aten._fused_sdp_choice(*on_twin, None, 0.0, True, enable_gqa=gqa))
    routed = [op for ops in _TWIN_ATTENTION.values() for op in ops]
    with flagos.routing.override({op: ["boxing"] for op in routed}):
        flagos.routing.reset_stats()
        _grads_match(lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=gqa), [q, k, v], tol=(2e-2, 2e-2))
        stats = flagos.routing.stats()
    served = {op for op in routed if stats.get(op, {}).get("boxing", {}).get("calls")}
    assert served == set(_TWIN_ATTENTION.get(choice, ())), (choice, stats)
    assert choice in (0, *_TWIN_ATTENTION), choice


def test_a_captured_step_runs_the_fused_kernels_of_the_eager_one():
    # A decode-like step (rms_norm, then attention with a mask, no dropout) captured in a
    # flagos graph takes the twin's fused kernels as eager calls do, so replay gives
    # eager's result bit for bit (a decomposition in the capture would not).
    twin = _needs_device_twin()
    torch.manual_seed(0)
    x = torch.randn(1, 4, 1, 64, dtype=torch.bfloat16, device="flagos")
    kv = torch.randn(1, 4, 32, 64, dtype=torch.bfloat16, device="flagos")
    mask = torch.zeros(1, 1, 1, 32, dtype=torch.bfloat16, device="flagos")
    mask[..., 20:] = float("-inf")
    w = torch.randn(64, dtype=torch.bfloat16, device="flagos")
    out = torch.empty_like(x)

    def step():
        out.copy_(F.scaled_dot_product_attention(F.rms_norm(x, (64,), w), kv, kv, attn_mask=mask))

    attention = [op for ops in _TWIN_ATTENTION.values() for op in ops]
    with torch.no_grad(), flagos.routing.override({op: ["boxing"] for op in [*FUSED, *attention]}):
        step()
        eager = out.clone()
        side = torch.flagos.Stream()
        with torch.flagos.stream(side):
            step()
        torch.flagos.synchronize()
        flagos.routing.reset_stats()
        graph = torch.flagos.Graph()
        with torch.flagos.graph(graph, stream=side):
            step()
        captured = flagos.routing.stats()
        out.zero_()
        graph.replay()
        torch.flagos.synchronize()
    assert captured[FUSED[0]]["boxing"]["calls"] == 1, captured.get(FUSED[0])
    choice = int(torch.ops.aten._fused_sdp_choice(
        *(t.to(twin) for t in (x, kv, kv)), mask.to(twin), 0.0, False))
    served = {op for op in attention if captured.get(op, {}).get("boxing", {}).get("calls")}
    assert served == set(_TWIN_ATTENTION.get(choice, ())[:1]), (choice, sorted(captured))
    assert "aten::rsqrt" not in captured, sorted(captured)
    assert torch.equal(out.cpu(), eager.cpu())
