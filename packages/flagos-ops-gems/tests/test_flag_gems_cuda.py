"""FlagGems itself through flagos, on a CUDA HAL (skipped elsewhere): ``gems`` serves the
overloads FlagGems implements, zero-copy on flagos memory, and matches native CUDA."""

from __future__ import annotations

import flagos
import pytest
import torch
import torch.nn.functional as F


def _gems():
    if not torch.cuda.is_available() or flagos.device_count() == 0:
        pytest.skip("needs CUDA")
    props = flagos.get_device_properties(0)
    if props.twin_device != "cuda":
        pytest.skip("needs a flagos device on a CUDA HAL (FLAGOS_HAL=cuda)")
    p = flagos.routing.providers().get("gems")
    if p is None:
        pytest.skip("flagos-ops-gems is not installed")
    why = p.unavailable_on(props.hal)
    if why:
        pytest.skip(f"gems cannot run here: {why}")
    return p


@pytest.fixture
def gems():
    p = _gems()
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["gems", "boxing", "cpu"]}):
        yield p


def _gems_calls(op: str) -> int:
    return flagos.routing.stats().get(op, {}).get("gems", {}).get("calls", 0)


def test_op_table_is_what_flag_gems_registers(gems) -> None:
    import flag_gems

    ops = gems.ops()
    assert len(ops) > 300, len(ops)
    assert {"aten::add.Tensor", "aten::mm", "aten::_softmax", "aten::native_layer_norm"} <= set(ops)
    fused = {"aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"}
    assert fused <= set(ops)
    assert set(ops) - fused <= {f"aten::{k}" for k, *_ in flag_gems._FULL_CONFIG}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_runs_fused_on_flag_gems(gems, dtype) -> None:
    x = torch.randn(4, 8, 64, dtype=dtype, requires_grad=True)
    w = torch.randn(64, dtype=dtype, requires_grad=True)
    xf = x.detach().to("flagos").requires_grad_()
    wf = w.detach().to("flagos").requires_grad_()
    F.rms_norm(xf, (64,), wf).float().square().sum().backward()
    F.rms_norm(x, (64,), w).float().square().sum().backward()
    assert _gems_calls("aten::_fused_rms_norm") == 1
    assert _gems_calls("aten::_fused_rms_norm_backward") == 1
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(xf.grad.cpu(), x.grad, **tol)
    torch.testing.assert_close(wf.grad.cpu(), w.grad, **tol)


HOT = {
    "add": (lambda a, b: a + b, "aten::add.Tensor"),
    "mul": (lambda a, b: a * b, "aten::mul.Tensor"),
    "mm": (lambda a, b: a @ b, "aten::mm"),
    "softmax": (lambda a, b: torch.softmax(a, -1), "aten::_softmax"),
    "layer_norm": (lambda a, b: F.layer_norm(a, (64,)), "aten::native_layer_norm"),
    "sum": (lambda a, b: a.sum(), "aten::sum"),
    "silu": (lambda a, b: F.silu(a), "aten::silu"),
    "gelu": (lambda a, b: F.gelu(a), "aten::gelu"),
    "exp": (lambda a, b: a.exp(), "aten::exp"),
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_hot_ops_run_on_flag_gems_and_match_cuda(gems, name: str) -> None:
    fn, op = HOT[name]
    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    fa, fb = a.to("flagos"), b.to("flagos")
    torch.flagos.synchronize()
    cuda_before = torch.cuda.memory_allocated()
    out = fn(fa, fb)
    torch.flagos.synchronize()
    assert out.device.type == "flagos"
    # the result (and any temporary) came from the flagos allocator, not torch's CUDA one
    assert torch.cuda.memory_allocated() == cuda_before
    torch.testing.assert_close(out.cpu(), fn(a, b).cpu(), rtol=1e-4, atol=1e-4)
    assert _gems_calls(op) == 1, flagos.routing.stats()


def test_embedding_and_stream(gems) -> None:
    table = torch.randn(100, 16, device="cuda")
    idx = torch.randint(0, 100, (40,), device="cuda")
    s = torch.flagos.Stream()
    with torch.flagos.stream(s):
        out = F.embedding(idx.to("flagos"), table.to("flagos"))
        y = out * 2
    s.synchronize()
    torch.testing.assert_close(y.cpu(), (F.embedding(idx, table) * 2).cpu())
    assert _gems_calls("aten::embedding") == 1


def test_dropout_follows_manual_seed(gems) -> None:
    x = torch.ones(4096, device="flagos")
    torch.manual_seed(5)
    first = F.dropout(x, 0.5, training=True).cpu()
    torch.manual_seed(5)
    again = F.dropout(x, 0.5, training=True).cpu()
    assert torch.equal(first, again)
    assert 0.4 < (first == 0).float().mean().item() < 0.6
    # dropout on a non-CUDA tensor is bernoulli_ and a mul (native_dropout is CUDA's fused path)
    assert _gems_calls("aten::bernoulli_.float") + _gems_calls("aten::native_dropout") == 2


def test_autograd_matches_cpu(gems) -> None:
    torch.manual_seed(0)
    w = torch.randn(32, 32, requires_grad=True)
    x = torch.randn(8, 32)
    fw = w.detach().to("flagos").requires_grad_()
    F.gelu(x.to("flagos") @ fw).softmax(-1).sum().backward()
    F.gelu(x @ w).softmax(-1).sum().backward()
    torch.testing.assert_close(fw.grad.cpu(), w.grad, rtol=1e-3, atol=1e-4)
    assert _gems_calls("aten::gelu_backward") >= 1 or _gems_calls("aten::gelu") >= 1


def test_broadcast_and_expanded_operands_match_cpu(gems) -> None:
    # FlagGems' Hopper mul indexes by flat offset: such calls are declined to boxing there
    # (flagos_ops_gems/_kernel_guards.py)
    torch.manual_seed(0)
    t, freqs = torch.tensor([10.0, 20.0]), torch.arange(16.0)
    got = t.to("flagos")[:, None] * freqs.to("flagos")[None, :]
    torch.testing.assert_close(got.cpu(), t[:, None] * freqs[None, :])
    y = torch.randn(4, 8, 64)
    g = torch.full((), 3.0, device="flagos").expand(4, 8, 64)
    torch.testing.assert_close((g * y.to("flagos")).cpu(), 3.0 * y)
    x = y.to("flagos").requires_grad_()
    x.square().sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * y)
    if torch.cuda.get_device_capability()[0] == 9:
        declined = flagos.routing.stats()["aten::mul.Tensor"]["gems"]["declined"]
        assert declined >= 3, declined
    z = torch.zeros(4, 4, device="flagos")
    z[:, 0].fill_(1.0)
    assert z.cpu().sum() == 4 and z.cpu()[:, 0].eq(1).all()


def test_multinomial_follows_an_explicit_generator(gems) -> None:
    # FlagGems draws from CUDA's default generator here, whatever it is given (the default
    # flagos generator's CUDA generator is that one; another is not): see
    # flagos_ops_gems/_default_generator.py
    prob = torch.rand(4, 50, device="flagos")
    g = torch.Generator(device="flagos")
    g.manual_seed(5)
    first = torch.multinomial(prob, 5, generator=g).cpu()
    torch.cuda.manual_seed_all(123)  # CUDA's default generator plays no part
    g.manual_seed(5)
    assert torch.equal(torch.multinomial(prob, 5, generator=g).cpu(), first)
    torch.flagos.manual_seed(7)
    seeded = torch.multinomial(prob, 5).cpu()
    torch.flagos.manual_seed(7)
    assert torch.equal(torch.multinomial(prob, 5).cpu(), seeded)
    assert _gems_calls("aten::multinomial") >= 4


def test_kernel_error_leaves_the_device_usable(gems) -> None:
    a, b = torch.randn(4, 5, device="flagos"), torch.randn(4, 5, device="flagos")
    before = a.cpu().clone()
    with pytest.raises(RuntimeError):
        torch.mm(a, b)  # 4x5 @ 4x5
    assert torch.equal(a.cpu(), before)
    torch.testing.assert_close((a @ b.t()).cpu(), before @ b.cpu().t(), rtol=1e-4, atol=1e-4)


def test_cpu_scalar_operands_are_declined(gems) -> None:
    # ATen takes a CPU scalar tensor beside device tensors (a Diffusers scheduler's
    # `alpha_prod_t ** 0.5 * sample`); FlagGems' Triton kernels cannot read host memory
    y = torch.randn(4, 8)
    scale = torch.tensor(0.25)
    torch.testing.assert_close((scale * y.to("flagos")).cpu(), scale * y)
    torch.testing.assert_close((y.to("flagos") * scale).cpu(), y * scale)
    assert flagos.routing.stats()["aten::mul.Tensor"]["gems"]["declined"] >= 2


def test_layout_assumptions_of_generic_kernels_are_guarded(gems) -> None:
    # FlagGems' group norm (channels per group not a power of two), nearest upsampling of
    # a channels-last input, slice_backward of a non-contiguous gradient:
    # flagos_ops_gems/_kernel_guards.py
    torch.manual_seed(0)
    x = torch.randn(2, 96, 16, 16)
    for groups in (32, 24):  # 3 and 4 channels per group
        norm = torch.nn.GroupNorm(groups, 96)
        xf = x.to("flagos").requires_grad_()
        xc = x.clone().requires_grad_()
        norm.to("flagos")(xf).square().sum().backward()
        norm.cpu()(xc).square().sum().backward()
        torch.testing.assert_close(xf.grad.cpu(), xc.grad, rtol=1e-3, atol=1e-3)
    last = torch.randn(2, 64, 8, 8).to(memory_format=torch.channels_last)
    got = F.interpolate(last.to("flagos"), scale_factor=2.0).cpu()
    torch.testing.assert_close(got, F.interpolate(last, scale_factor=2.0))
    q = torch.randn(2, 4, 12, 8)
    qf = q.to("flagos").requires_grad_()
    qc = q.clone().requires_grad_()
    w = torch.randn(2, 4, 12, 8)

    def rotate_half(t):  # a rotary embedding's: cat's backward hands slices views
        return torch.cat((-t[..., 4:], t[..., :4]), dim=-1)

    (rotate_half(qf) * w.to("flagos")).sum().backward()
    (rotate_half(qc) * w).sum().backward()
    torch.testing.assert_close(qf.grad.cpu(), qc.grad)
