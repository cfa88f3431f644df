"""The provider's whole mechanism on the project's own Triton kernels (triton_test_kernels):
on sim under Triton's interpreter on CPU twin aliases, on a CUDA HAL compiled for the GPU.
FlagGems itself is served by exactly this mechanism (test_flag_gems_cuda.py on a GPU)."""

from __future__ import annotations

import os

import flagos
import pytest
import torch
import triton_test_kernels

PROVIDER = "tritontest"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _calls(op: str, provider: str = PROVIDER) -> int:
    return flagos.routing.stats().get(op, {}).get(provider, {}).get("calls", 0)


def _declined(op: str, provider: str = PROVIDER) -> int:
    return flagos.routing.stats().get(op, {}).get(provider, {}).get("declined", 0)


def _snapshot(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.storage_offset(), t.data_ptr(), t.cpu().clone())


def _unchanged(t: torch.Tensor, snap: tuple) -> bool:
    return (t.shape, t.stride(), t.storage_offset(), t.data_ptr()) == snap[:4] and \
        torch.equal(t.cpu(), snap[4])


def test_functional_op_runs_on_twin_aliases_and_result_is_flagos_memory(test_library) -> None:
    a, b = torch.randn(100), torch.randn(100)
    x, y = a.to("flagos"), b.to("flagos")
    sx, sy = _snapshot(x), _snapshot(y)
    triton_test_kernels.seen["results"].clear()
    torch.flagos.synchronize()
    before = torch.flagos.memory_allocated()
    out = torch.add(x, y, alpha=2)
    torch.flagos.synchronize()
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), a + 2 * b)
    assert _calls("aten::add.Tensor") == 1  # served as the functional op itself
    # the kernel saw twin tensors (not flagos ones) and its own allocation is the result
    twin = triton_test_kernels.seen["devices"][-1]
    assert twin.type == flagos.get_device_properties(0).twin_device
    if not INTERPRETED:  # the interpreter keeps a tensor of its own over the result's bytes
        assert triton_test_kernels.seen["results"] == [out.data_ptr()]
    assert torch.flagos.memory_allocated() - before >= out.numel() * out.element_size()
    assert _unchanged(x, sx) and _unchanged(y, sy)  # the caller's tensors untouched


def test_result_made_in_python_is_adopted_without_a_copy(test_library) -> None:
    a = torch.randn(33)
    triton_test_kernels.seen["results"].clear()
    out = -a.to("flagos")
    torch.testing.assert_close(out.cpu(), -a)
    assert triton_test_kernels.seen["results"] == [out.data_ptr()]
    assert _calls("aten::neg") == 1


def test_structured_op_arrives_as_itself_not_as_out(test_library) -> None:
    a = torch.randn(70)
    out = a.to("flagos").abs()
    torch.testing.assert_close(out.cpu(), a.abs())
    assert _calls("aten::abs") == 1
    assert _calls("aten::abs.out", "boxing") == 0


def test_ops_arriving_as_themselves_stay_on_boxing_on_other_routes(test_library) -> None:
    torch.ones(3, device="flagos").abs()  # the library is loaded: abs arrives as itself
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["boxing", "cpu"]}):
        out = torch.tensor([-2.0, 3.0], device="flagos").abs()
    assert out.cpu().tolist() == [2.0, 3.0]
    assert _calls("aten::abs", "boxing") == 1 and _calls("aten::abs", "cpu") == 0


def test_declined_call_goes_down_the_chain(test_library) -> None:
    a, b = torch.randn(8, 8), torch.randn(8)  # broadcasting: the test kernel declines
    out = a.to("flagos") + b.to("flagos")
    torch.testing.assert_close(out.cpu(), a + b)
    assert _declined("aten::add.Tensor") == 1
    assert _calls("aten::add.Tensor") == 0


def test_in_place_result_is_the_callers_tensor(test_library) -> None:
    base = torch.ones(6, device="flagos")
    view = base[1:4]
    out = view.mul_(torch.full((3,), 3.0, device="flagos"))
    assert out is view
    assert base.cpu().tolist() == [1.0, 3.0, 3.0, 3.0, 1.0, 1.0]
    assert _calls("aten::mul_.Tensor") == 1


def test_kernel_error_on_a_functional_op_declines_to_the_next_provider(test_library) -> None:
    """A library kernel raising where ATen computes is a gap of the library: the call runs
    on the next provider (warned once per op), the inputs untouched."""
    a, b = torch.randn(10), torch.randn(10)
    x, y = a.to("flagos"), b.to("flagos")
    sx, sy = _snapshot(x), _snapshot(y)
    with pytest.warns(UserWarning, match=r"kernel library raised on aten::add\.Tensor .*"
                                         r"alpha 13 is refused.*next provider"):
        got = torch.add(x, y, alpha=13)
    torch.testing.assert_close(got.cpu(), a + 13 * b)
    assert _unchanged(x, sx) and _unchanged(y, sy)
    assert _calls("aten::add.Tensor", "boxing") + _calls("aten::add.out", "boxing") >= 1
    torch.testing.assert_close((x + y).cpu(), a + b)  # the kernel serves other calls


def test_out_of_memory_in_a_kernel_reaches_the_caller_as_such(test_library) -> None:
    x = torch.randn(10).to("flagos")
    with pytest.raises(torch.OutOfMemoryError, match=r"aten::add\.Tensor.*alpha 17"):
        torch.add(x, x, alpha=17)


def test_kernel_error_on_an_in_place_op_reaches_the_caller(test_library) -> None:
    """The kernel may have written the caller's tensor before raising: no other provider
    runs, the error names the op and the library's reason, the device stays usable."""
    a, b = torch.randn(13), torch.randn(13)
    x, y = a.to("flagos"), b.to("flagos")
    sy = _snapshot(y)
    with pytest.raises(RuntimeError, match=r"aten::mul_\.Tensor.*13 elements are refused"):
        x.mul_(y)
    assert _unchanged(y, sy)
    torch.testing.assert_close((x + y).cpu(), a + b)  # the device still works


def test_random_op_follows_manual_seed_and_generators(test_library) -> None:
    def draw(gen=None) -> torch.Tensor:
        return torch.empty(256, device="flagos").bernoulli_(0.5, generator=gen).cpu()

    torch.manual_seed(7)
    first, second = draw(), draw()
    torch.manual_seed(7)
    assert torch.equal(draw(), first)
    assert not torch.equal(first, second)  # the generator advanced
    assert 0.3 < first.mean().item() < 0.7
    g = torch.Generator(device="flagos")
    g.manual_seed(3)
    mine = draw(g)
    g.manual_seed(3)
    assert torch.equal(draw(g), mine)
    assert _calls("aten::bernoulli_.float") == 5


def test_keyword_aliases_apply_only_to_kernels_lacking_the_schema_name() -> None:
    from flagos_ops_gems._keywords import adapt_keywords

    def own_name(self, n, replacement=False, *, gen=None):
        return gen

    def schema_name(self, n, replacement=False, *, generator=None):
        return generator

    aliases = {"generator": "gen"}
    renamed = adapt_keywords("aten::multinomial", own_name, aliases)
    assert renamed(None, 1, generator="g") == "g"
    assert adapt_keywords("aten::multinomial", schema_name, aliases) is schema_name
    assert adapt_keywords("aten::multinomial", own_name, {}) is own_name


def test_autograd_through_the_provider(test_library) -> None:
    a = torch.randn(50, requires_grad=True)
    x = a.detach().to("flagos").requires_grad_()
    (x.abs() + x).sum().backward()
    (a.abs() + a).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), a.grad)
    assert _calls("aten::abs") == 1 and _calls("aten::add.Tensor") >= 1


def test_explain_names_the_provider_and_what_it_does_not_serve(test_library) -> None:
    text = str(flagos.routing.explain("aten::add.Tensor"))
    assert f"served by: {PROVIDER}" in text
    text = str(flagos.routing.explain("aten::mm"))
    assert f"{PROVIDER}: skipped, does not serve aten::mm" in text


def test_library_loads_once_on_first_resolution() -> None:
    pytest.importorskip("triton")
    from flagos_ops_gems import register_library
    from triton_test_kernels import TritonTestKernels

    library = TritonTestKernels()
    flagos.routing.register_provider(register_library("lazytest", library))
    assert library.loads == 0  # registering imports nothing
    with flagos.routing.override({"aten::abs": ["lazytest", "boxing"]}):
        torch.ones(3, device="flagos").abs()
        torch.ones(3, device="flagos").abs()
        flagos.routing.explain("aten::abs")
    assert library.loads == 1


def test_unavailable_library_is_skipped_with_its_reason() -> None:
    pytest.importorskip("triton")
    from flagos_ops_gems import register_library
    from triton_test_kernels import TritonTestKernels

    library = TritonTestKernels(fail="not installed: the test library is switched off")
    flagos.routing.register_provider(register_library("offtest", library))
    with flagos.routing.override({"aten::abs": ["offtest", "boxing"]}):
        out = torch.tensor([-1.0, 2.0], device="flagos").abs()
        text = str(flagos.routing.explain("aten::abs"))
    assert out.cpu().tolist() == [1.0, 2.0]
    assert "offtest: skipped, not installed: the test library is switched off" in text
    assert library.loads == 1
