"""Shadow verification: sampled calls checked against a reference, mismatches counted,
a wrong provider (installed through a real ``flagos.ops`` entry point) quarantined while
the model's results stay correct."""

from __future__ import annotations

import importlib
import textwrap
import warnings

import pytest
import torch
from flagos import routing
from flagos.models import LlamaConfig, TinyLlama
from flagos.routing import shadow

# A provider that computes mul with torch's CPU kernels and then adds one: wrong on purpose.
WRONG_MODULE = '''
import torch
from torch.utils._pytree import tree_map
from flagos.routing import Provider


def _cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


class OffByOne(Provider):
    name = "offbyone"

    def serves(self, op):
        return op in {"aten::mul.Tensor", "aten::mul.out"}

    def __call__(self, op, args, kwargs):
        device = args[0].device
        result = op(*tree_map(_cpu, args), **tree_map(_cpu, kwargs)) + 1
        if "out" in kwargs:
            kwargs["out"].copy_(result)
            return kwargs["out"]
        return result.to(device)


provider = OffByOne()
'''


@pytest.fixture
def wrong_provider(install_distribution, monkeypatch: pytest.MonkeyPatch):
    """The off-by-one provider installed as a distribution with a flagos.ops entry point."""
    install_distribution("offbyone", WRONG_MODULE, """
        [flagos.ops]
        offbyone = {module}:provider
        """)
    routing.reset()
    assert "offbyone" in routing.providers()
    yield "offbyone"
    shadow.disable(clear=True)
    routing.reset_stats()
    monkeypatch.undo()
    importlib.invalidate_caches()
    routing.reset()


@pytest.fixture(autouse=True)
def _shadow_off():
    yield
    shadow.disable(clear=True)
    routing.reset()


def _loss(model: TinyLlama, tokens: torch.Tensor) -> torch.Tensor:
    return model.loss(tokens)


def test_off_adds_nothing_to_chains() -> None:
    assert shadow.config() is None
    assert "shadow" not in routing.resolve("aten::mm", 0)
    shadow.enable("aten::mm", rate=1.0)
    assert routing.resolve("aten::mm", 0)[0] == "shadow"
    assert routing.resolve("aten::mm.out", 0)[0] == "shadow"
    assert "shadow" not in routing.resolve("aten::add.Tensor", 0)
    shadow.disable()
    assert "shadow" not in routing.resolve("aten::mm", 0)


def test_bad_configuration_is_named() -> None:
    with pytest.raises(ValueError, match="unknown op 'aten::mmm'"):
        shadow.enable("aten::mmm")
    with pytest.raises(ValueError, match="rate 0.0"):
        shadow.enable("aten::mm", rate=0.0)
    with pytest.raises(ValueError, match="reference 'nope'"):
        shadow.enable("aten::mm", reference="nope")
    assert shadow.config() is None
    with pytest.raises(routing.RoutingConfigError, match="unknown provider 'shadow'"):
        routing.set("aten::mm=shadow")  # the wrapper is no routing-file name


def test_sampling_counts_correct_provider(device0) -> None:
    routing.set("aten::mm=boxing")
    shadow.enable(["aten::mm"], rate=0.25)
    routing.reset_stats()
    a = torch.randn(8, 8, device="flagos")
    for _ in range(8):
        out = a @ a
    torch.testing.assert_close(out.cpu(), a.cpu() @ a.cpu())
    rows = {p: r for op, by in routing.stats().items() if op.startswith("aten::mm")
            for p, r in by.items()}
    assert "shadow" not in rows
    assert rows["boxing"]["calls"] == 8
    assert rows["boxing"]["shadowed"] == 2  # the first call and the fifth
    assert rows["boxing"]["mismatches"] == 0


def test_wrong_provider_quarantined_model_stays_correct(wrong_provider: str, device0) -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                      max_seq_len=16)
    model = TinyLlama(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, 9))
    want = _loss(model, tokens)

    routing.set({"aten::mul": [wrong_provider, "boxing"]})
    on = model.to("flagos")
    t = tokens.to("flagos")
    # Without shadowing the wrong provider corrupts the model.
    assert not torch.allclose(_loss(on, t).cpu(), want, rtol=1e-4)

    shadow.enable("aten::mul", rate=1.0, quarantine=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _loss(on, t)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    msgs = [str(w.message) for w in caught if issubclass(w.category, shadow.ShadowMismatchWarning)]
    assert len(msgs) == 1, msgs
    assert "'offbyone'" in msgs[0] and "aten::mul" in msgs[0] and "float32" in msgs[0]
    assert "elements outside" in msgs[0]
    assert ("aten::mul", wrong_provider) in shadow.quarantined()
    rows = {p: r for op, by in routing.stats().items() if op.startswith("aten::mul")
            for p, r in by.items()}
    assert rows[wrong_provider]["mismatches"] == 1
    assert rows["boxing"]["shadowed"] >= 1 and rows["boxing"]["mismatches"] == 0
    assert wrong_provider not in routing.resolve("aten::mul.out", 0)
    assert "quarantined by shadow verification" in str(routing.explain("aten::mul.out"))

    # Still quarantined with shadowing off: the model stays correct at no cost.
    shadow.disable()
    assert routing.resolve("aten::mul.out", 0) == ["boxing", "cpu"]
    torch.testing.assert_close(_loss(on, t).cpu(), want, rtol=1e-4, atol=1e-5)
    shadow.release_quarantine("aten::mul")
    assert routing.resolve("aten::mul.out", 0)[0] == wrong_provider


def test_counting_without_quarantine_keeps_provider(wrong_provider: str, device0) -> None:
    routing.set({"aten::mul": [wrong_provider, "boxing"]})
    shadow.enable("aten::mul", rate=1.0)
    a = torch.ones(3, device="flagos")
    out = a * a
    assert torch.equal(out.cpu(), torch.full((3,), 2.0))  # observed, not corrected
    stats = routing.stats()
    row = next(by[wrong_provider] for op, by in stats.items() if op.startswith("aten::mul"))
    assert row["mismatches"] == 1 and "expected 1" in row["last_error"]
    assert row["last_inputs"].startswith("[3] float32, [3] float32")
    assert not shadow.quarantined()
    b = torch.ones(4, 6, device="flagos")
    b.t() * b.t()  # the layout of a mismatching call is named
    row = next(by[wrong_provider] for op, by in routing.stats().items()
               if op.startswith("aten::mul"))
    assert row["mismatches"] == 2 and "[6, 4] float32 strides (1, 6)" in row["last_inputs"]


def test_in_place_op_against_another_provider(device0) -> None:
    shadow.enable("aten::masked_fill_", rate=1.0, reference="boxing")
    routing.set("aten::masked_fill_=cpu")
    a = torch.ones(4, device="flagos")
    a.masked_fill_(torch.tensor([True, False, True, False], device="flagos"), 3.0)
    assert torch.equal(a.cpu(), torch.tensor([3.0, 1.0, 3.0, 1.0]))
    row = next(by["cpu"] for op, by in routing.stats().items()
               if op.startswith("aten::masked_fill_"))
    assert row["shadowed"] == 1 and row["mismatches"] == 0


def test_environment(run_python) -> None:
    code = textwrap.dedent("""
        import torch, flagos
        from flagos import routing
        a = torch.randn(4, 4, device="flagos")
        for _ in range(3):
            a @ a
        rows = [r for op, by in routing.stats().items() if op.startswith("aten::mm")
                for p, r in by.items() if "shadowed" in r]
        print(sum(r["shadowed"] for r in rows), sum(r["mismatches"] for r in rows))
        """)
    out = run_python(code, env={"FLAGOS_SHADOW": "aten::mm", "FLAGOS_SHADOW_RATE": "1"})
    assert out.stdout.split() == ["3", "0"]


def test_every_op_of_a_training_step(device0) -> None:
    """'*' shadows every routed op of a TinyLlama training step (native first where it
    serves, so the checked providers include a C++ engine of another library): no
    mismatches, and the step's loss equals the CPU's."""
    from flagos.tuning import tinyllama

    routing.set("hal.sim.default=native,boxing,cpu")
    shadow.enable("*", rate=1.0)
    routing.reset_stats()
    want = tinyllama.training_step("tiny", "cpu")()
    got = tinyllama.training_step("tiny", "flagos")()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    rows = [(op, p, r) for op, by in routing.stats().items() for p, r in by.items()]
    checked = [(op, p) for op, p, r in rows if "shadowed" in r]
    assert len(checked) > 20
    assert not [(op, p, r["last_error"]) for op, p, r in rows if r.get("mismatches")]
    # The checks convert dtypes on flagos themselves (aten::_to_copy): counted, not checked.
    unchecked = [(op, p) for op, p, r in rows
                 if r["calls"] and "shadowed" not in r and op != "aten::_to_copy"]
    assert not unchecked, f"ops not checked: {unchecked}"
    assert not [(op, p, r["last_unchecked"]) for op, p, r in rows if r.get("unchecked")]


def test_ops_the_cpu_reference_cannot_run(device0) -> None:
    """A convolution shadowed against the CPU: its forward and backward
    (convolution_overrideable and its backward, which torch's CPU kernels do not serve) are
    checked against aten::convolution and its backward; a call the reference cannot run is
    counted as unchecked and its results stand."""
    shadow.enable("*", rate=1.0)
    routing.reset_stats()
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 8, 8)
    conv_f, x_f = torch.nn.Conv2d(3, 4, 3, padding=1).to("flagos"), x.to("flagos")
    conv_f.load_state_dict(conv.state_dict())
    conv(x).square().sum().backward()
    conv_f(x_f).square().sum().backward()
    torch.testing.assert_close(conv_f.weight.grad.cpu(), conv.weight.grad, rtol=1e-4, atol=1e-4)
    rows = {op: r for op, by in routing.stats().items() for p, r in by.items()
            if "convolution" in op and "shadowed" in r}
    for op in ("aten::convolution_overrideable", "aten::convolution_backward_overrideable"):
        assert rows[op]["shadowed"] >= 1 and not rows[op]["unchecked"], rows[op]
    assert not [r["last_error"] for r in rows.values() if r["mismatches"]]
    shadow.reset_counts()
    routing.reset_stats()
    def no_kernel(*args, **kwargs):
        raise NotImplementedError("no kernel")

    with pytest.MonkeyPatch.context() as m:  # a reference that cannot run the call
        for name in ("aten::cumsum", "aten::cumsum.out"):
            m.setitem(shadow._CPU_EQUIVALENT, name, no_kernel)
        got = torch.cumsum(torch.ones(3, device="flagos"), 0)
    torch.testing.assert_close(got.cpu(), torch.arange(1.0, 4.0))
    row = next(r for op, by in routing.stats().items() if op.startswith("aten::cumsum")
               for r in by.values() if r.get("unchecked"))
    assert "NotImplementedError: no kernel" in row["last_unchecked"]
