"""torch.flagos next to torch.cuda: the table of docs/python_api.md is what
tools/cuda_parity.py generates from the installed torch and flagos, and names it calls the
same take torch.cuda's arguments and do what torch.cuda's do, on flagos devices."""

from __future__ import annotations

import importlib.util
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

F = torch.flagos
ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "python_api.md"
MiB = 2**20


@pytest.fixture(scope="module")
def parity() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("_cuda_parity", ROOT / "tools" / "cuda_parity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


# ---- the table ------------------------------------------------------------------------

def test_every_gap_has_a_reason(parity):
    rows = parity.entries()  # raises UnexplainedGap when a reason is missing
    assert {e.status for e in rows} <= {"same", "differs", "missing"}
    assert all(e.reason for e in rows if e.status != "same")


def test_the_page_holds_the_generated_table(parity):
    old = parity.current_block(PAGE)
    recorded = parity.RELEASE.search(old).group(1)
    if recorded != parity.release():
        pytest.skip(f"the table is for torch {recorded}, this is torch {parity.release()}")
    assert parity.unknown_reasons() == [], "tools/cuda_parity.toml names what torch lacks"
    assert old == parity.block(), ("docs/python_api.md is out of date: "
                                   "python tools/cuda_parity.py --write docs/python_api.md")


def test_the_classifier_tells_signatures_apart(parity):
    def cuda(device=None):
        pass

    def renamed(dev=None):
        pass

    def more_optional(device=None, abbreviated=False):
        pass

    def more_required(device=None, *, stream):
        pass

    assert parity.compare(cuda, renamed)[0] == "differs"
    assert parity.compare(cuda, more_optional) == ("same", "")
    assert parity.compare(cuda, more_required)[0] == "differs"
    assert parity.compare(cuda, type("C", (), {}))[0] == "differs"
    assert parity.compare((1,), [1])[0] == "differs"
    assert parity.compare(torch.cuda.amp, types.ModuleType("empty"))[0] == "differs"


def test_the_public_names_rule(parity):
    names = set(parity.public_names())
    assert set(torch.cuda.__all__) <= names
    assert "OutOfMemoryError" in names  # torch's own class, re-exported
    assert not names & {"os", "torch", "Any", "Optional", "lru_cache", "TYPE_CHECKING"}


# ---- the same names, with torch.cuda's arguments ---------------------------------------

def test_torch_cuda_keywords_are_accepted(two_devices, device0):
    F.synchronize(device=0)
    assert F.get_device_name(device="flagos:1") == F.get_device_properties(device=1).name
    assert F.memory_allocated(device=0) == F.memory_stats(device=0)["allocated_bytes.all.current"]
    state = F.get_rng_state(device=1)
    x = torch.rand(8, device="flagos:1").cpu()
    F.set_rng_state(new_state=state, device=1)
    assert torch.equal(torch.rand(8, device="flagos:1").cpu(), x)
    F.set_rng_state_all(new_states=F.get_rng_state_all())
    s = F.Stream(device=1)
    with F.stream(stream=s):
        assert F.current_stream(device=1) == s
    F.set_stream(stream=F.default_stream(device=0))
    with F.device(device=1):
        assert F.current_device() == 1


def test_values_have_torch_cuda_types():
    assert isinstance(F.default_generators, tuple)
    assert isinstance(F.is_available(), bool) and isinstance(F.device_count(), int)
    free, total = F.mem_get_info()
    assert isinstance(free, int) and isinstance(total, int)
    assert isinstance(F.current_stream(), F.Stream) and isinstance(F.current_stream(), torch.Stream)
    assert isinstance(F.Event(), torch.Event)
    assert F.OutOfMemoryError is torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


def test_device_of_follows_the_tensor(two_devices, device0):
    x = torch.ones(2, device="flagos:1")
    with F.device_of(x):
        assert F.current_device() == 1
        assert torch.empty(1, device="flagos").device.index == 1
    assert F.current_device() == 0
    with F.device_of(x.untyped_storage()):
        assert F.current_device() == 1
    with F.device_of(torch.ones(2)):  # not on flagos: no change
        assert F.current_device() == 0
    F.set_device(1)
    with F.device(-1):  # -1: no change, as torch.cuda.device(-1)
        assert F.current_device() == 1
    assert F.current_device() == 1


def test_stream_returns_a_stream_context_that_restores_both_devices(two_devices, device0):
    s1 = F.Stream(device=1)
    mine0 = F.Stream(device=0)
    F.set_stream(mine0)
    ctx = F.stream(s1)
    assert isinstance(ctx, F.StreamContext)
    a = torch.randn(64, 64)
    with ctx:
        assert F.current_device() == 1
        assert F.current_stream() == s1
        y = a.to("flagos") @ a.to("flagos")  # queued on s1
    s1.synchronize()
    torch.testing.assert_close(y.cpu(), a @ a)
    assert F.current_device() == 0
    assert F.current_stream(0) == mine0  # the previous stream of each device is back
    assert F.current_stream(1) == F.default_stream(1)
    with F.StreamContext(None):
        assert F.current_stream(0) == mine0
    F.set_stream(F.default_stream(0))


def test_event_refuses_what_flagos_has_not(device0):
    with pytest.raises(NotImplementedError, match="graph capture"):
        F.Event(external=True)
    with pytest.raises(NotImplementedError, match="interprocess"):
        F.Event(interprocess=True)


# ---- memory -----------------------------------------------------------------------------

def test_memory_stats_as_nested_dict_nests_memory_stats(device0):
    x = torch.empty(MiB, dtype=torch.uint8, device="flagos")
    flat, nested = F.memory_stats(), F.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    assert nested["num_ooms"] == flat["num_ooms"]

    def leaves(d, prefix=""):
        for k, v in d.items():
            yield from leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else [(prefix + k, v)]

    assert dict(leaves(nested)) == flat
    del x


def test_deprecated_memory_names_warn_and_mean_the_new_ones(device0):
    with pytest.warns(FutureWarning, match="memory_reserved"):
        assert F.memory_cached() == F.memory_reserved()
    with pytest.warns(FutureWarning, match="max_memory_reserved"):
        assert F.max_memory_cached() == F.max_memory_reserved()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="flagos")
    del x
    assert F.max_memory_allocated() >= F.memory_allocated() + 4 * MiB
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        F.reset_max_memory_allocated()
    assert F.max_memory_allocated() == F.memory_allocated()
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        F.reset_max_memory_cached()
    assert F.max_memory_reserved() == F.memory_reserved()


def test_caching_allocator_alloc_and_delete(two_devices, device0):
    before = F.memory_allocated(1)
    ptr = F.caching_allocator_alloc(3 * MiB, device=1)
    assert ptr != 0 and F.memory_allocated(1) >= before + 3 * MiB
    segments = [s for s in F.memory_snapshot() if s["device"] == 1]
    assert any(s["address"] <= ptr < s["address"] + s["total_size"] for s in segments)
    F.caching_allocator_delete(ptr)
    assert F.memory_allocated(1) == before
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        F.caching_allocator_delete(ptr)
    assert F.caching_allocator_alloc(0) == 0
    F.caching_allocator_delete(0)
    with pytest.raises(ValueError, match="not on flagos:0"):
        F.caching_allocator_alloc(16, device=0, stream=F.Stream(device=1))
    s = F.Stream(device=0)
    ptr = F.caching_allocator_alloc(MiB, stream=s)
    assert any(seg["stream"] == s.stream_id for seg in F.memory_snapshot()
               if seg["address"] <= ptr < seg["address"] + seg["total_size"])
    F.caching_allocator_delete(ptr)


def test_allocator_backend_and_device_memory_used(device0, sim_only):
    assert F.get_allocator_backend() == "native"  # passthrough: test_memory's own process
    F.empty_cache()
    used = F.device_memory_used()
    assert used == F.mem_get_info()[1] - F.mem_get_info()[0]
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="flagos")
    assert F.device_memory_used() >= used + 64 * MiB
    del x
    F.empty_cache()
    assert F.device_memory_used() == used


def test_out_of_memory_is_torch_cuda_s_error(device0):
    with pytest.raises(F.OutOfMemoryError, match="out of memory on flagos:0"):
        torch.empty(F.get_device_properties(0).total_memory * 2, dtype=torch.uint8,
                    device="flagos")
    y = torch.arange(4.0, device="flagos")
    assert (y * 2).sum().item() == 12.0


# ---- dtypes and amp ----------------------------------------------------------------------

def test_is_bf16_supported(device0):
    twin = F.twin_device()
    if twin is not None and twin.type == "cpu":
        assert F.is_bf16_supported(False) == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert F.is_bf16_supported()
    a = torch.randn(16, 16).bfloat16()
    torch.testing.assert_close((a.to("flagos") @ a.to("flagos")).cpu(), a @ a)


def test_amp_is_torch_cuda_amp_for_flagos(device0):
    assert not F.amp.amp_definitely_not_available()
    lin = torch.nn.Linear(8, 8)
    ref = torch.nn.Linear(8, 8).to("flagos")
    ref.load_state_dict(lin.state_dict())
    x = torch.randn(4, 8)
    with pytest.warns(FutureWarning, match="torch.amp.autocast"):
        ctx = F.amp.autocast(dtype=torch.bfloat16)
    with ctx:
        y = ref(x.to("flagos"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = lin(x)
    assert y.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(y.cpu(), want)

    with pytest.warns(FutureWarning, match="torch.amp.GradScaler"):
        scaler = F.amp.GradScaler(init_scale=2.0**10)
    cpu_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    for model, sc, dev in ((ref, scaler, "flagos"), (lin, cpu_scaler, "cpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sc.scale(model(x.to(dev)).square().sum()).backward()
        sc.step(opt)
        sc.update()
    assert scaler.get_scale() == cpu_scaler.get_scale()
    torch.testing.assert_close(ref.weight.detach().cpu(), lin.weight.detach())


def test_amp_custom_fwd_casts_on_flagos(device0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)

        class Square(torch.autograd.Function):
            @staticmethod
            @F.amp.custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, x):
                return x * x

            @staticmethod
            @F.amp.custom_bwd
            def backward(ctx, g):
                return g

    x = torch.randn(4, dtype=torch.float16).to("flagos")
    with torch.autocast("flagos", dtype=torch.float16):
        y = Square.apply(x)
    assert y.dtype == torch.float32  # cast_inputs applied under flagos autocast
    torch.testing.assert_close(y.cpu(), x.cpu().float() ** 2)
