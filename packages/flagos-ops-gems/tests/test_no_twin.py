"""A kernel library on devices without a twin (``FLAGOS_NO_TWIN=1``): loaded for flagos
devices, its kernels get the flagos tensors themselves. On sim the project's Triton test
kernels run under Triton's interpreter; FlagGems itself is loaded with ``torch.flagos`` as
its device module (its kernels then compile for the HAL's Triton target, which sim lacks)."""

from __future__ import annotations

import importlib.util
import os

import pytest

pytest.importorskip("triton")

NO_TWIN = {"FLAGOS_NO_TWIN": "1", "FLAGOS_HAL": "sim", "TRITON_INTERPRET": "1"}

LIBRARY_ON_FLAGOS = r"""
import warnings
import flagos, torch
import triton_test_kernels as k
from flagos_ops_gems import register_library

assert torch.flagos.get_device_properties(0).twin_device == "none"
flagos.routing.register_provider(register_library("notwin", k.TritonTestKernels()))

def stats(op):
    return flagos.routing.stats().get(op, {}).get("notwin", {})

with flagos.routing.override({"default": ["notwin", "cpu"]}):
    a, b = torch.randn(100), torch.randn(100)
    x, y = a.to("flagos"), b.to("flagos")
    out = torch.add(x, y, alpha=2)
    assert out.device.type == "flagos", out.device
    torch.testing.assert_close(out.cpu(), a + 2 * b)
    assert k.seen["devices"][-1].type == "flagos", k.seen["devices"]
    assert stats("aten::add.Tensor")["calls"] == 1

    # a call the kernel declines goes down the route, inputs as they were
    d = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(torch.add(d.to("flagos"), d.to("flagos")).cpu(), d + d)
    assert stats("aten::add.Tensor")["declined"] == 1

    # a kernel that raises on a functional op declines it, with one warning
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.testing.assert_close(torch.add(x, y, alpha=13).cpu(), a + 13 * b)
    assert any("alpha 13 is refused" in str(m.message) for m in w), [str(m.message) for m in w]
    torch.testing.assert_close(x.cpu(), a)

    # an in-place op writes the caller's tensor
    z = x.clone()
    r = z.mul_(y)
    assert r is z
    torch.testing.assert_close(z.cpu(), a * b)

    # a kernel that calls its own op again on flagos tensors: that call takes the next
    # provider (no recursion into the kernel)
    torch.testing.assert_close(torch.neg(x).cpu(), -a)
    assert k.seen["devices"][-1].type == "flagos"
    assert stats("aten::neg")["calls"] == 1
    assert "served by: notwin" in str(flagos.routing.explain("aten::abs"))
print("ok")
"""


def test_a_library_loaded_for_flagos_runs_on_flagos_tensors(run_python) -> None:
    from pathlib import Path

    r = run_python(LIBRARY_ON_FLAGOS, path=[Path(__file__).parent], env=NO_TWIN)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


SCALARS_WITHOUT_A_TWIN = r"""
import flagos, torch
from flagos_ops_gems import KernelLibrary, register_library

got = []


def div(self, other):
    got.append(other if not isinstance(other, torch.Tensor) else other.device.type)
    return torch.div(self, other)  # the same op again: the route's next provider runs it


def mul_(self, other):
    got.append(("mul_", other))
    return NotImplemented


class Probe(KernelLibrary):
    name = "scalar probe"

    def load(self):
        return {"aten::div.Tensor": div, "aten::mul_.Tensor": mul_}, frozenset({"flagos"})


flagos.routing.register_provider(register_library("probe", Probe()))
with flagos.routing.override({"default": ["probe", "cpu"]}):
    a = torch.randn(6)
    x = a.to("flagos")
    # the Python scalar of `x / 2.0` reaches the kernel as the scalar it was
    torch.testing.assert_close((x / 2.0).cpu(), a / 2.0)
    n = torch.arange(6)
    r = n.to("flagos") / 4
    assert r.dtype == torch.float32 and torch.equal(r.cpu(), n / 4), r
    assert got == [2.0, 4] and type(got[1]) is int, got
    # a 0-dim CPU tensor the caller made is declined before the kernel (its device kernels
    # cannot read host memory)
    got.clear()
    torch.testing.assert_close((x / torch.tensor(2.0)).cpu(), a / 2.0)
    assert got == [], got
    # an in-place op's scalar reaches its kernel too (here it declines: the CPU runs it)
    y = x.clone()
    y.mul_(3.0)
    torch.testing.assert_close(y.cpu(), a * 3.0)
    assert got == [("mul_", 3.0)], got
    # ... unless ATen refuses the call: a float result cannot be stored in an int tensor
    got.clear()
    m = n.to("flagos")
    try:
        m.mul_(0.5)
        raise AssertionError("int_tensor.mul_(0.5) did not raise")
    except RuntimeError as e:
        assert "can't be cast" in str(e), e
    assert got == [] and torch.equal(m.cpu(), n), (got, m)
    m.mul_(2)
    assert got == [("mul_", 2)] and torch.equal(m.cpu(), n * 2), (got, m)
    assert flagos.routing.stats()["aten::div.Tensor"]["probe"]["calls"] == 2
print("ok")
"""


def test_python_scalars_reach_the_kernel_without_a_twin(run_python) -> None:
    # Without a twin, declining a call for its wrapped number would send every tensor of it
    # through host memory (the CPU fallback).
    r = run_python(SCALARS_WITHOUT_A_TWIN, env=NO_TWIN)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


FLAG_GEMS_ON_FLAGOS = r"""
import warnings
import flagos, torch
import flagos_ops_gems._flag_gems as loader
from flagos_ops_gems import FlagGems, register_library

# sim names no Triton target: load FlagGems as the cuda HAL's target would (nvidia configs)
loader.vendor_and_backend = lambda index=0: ("nvidia", "cuda", (9, 0))
library = FlagGems()
flagos.routing.register_provider(register_library("gemsnotwin", library))
with flagos.routing.override({"aten::add.Tensor": ["gemsnotwin", "cpu"]}):
    a, b = torch.randn(8), torch.randn(8)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torch.add(a.to("flagos"), b.to("flagos"))
    import flag_gems
    assert flag_gems.device == "flagos", flag_gems.device
    fn = flag_gems.runtime.torch_device_fn
    assert fn.device is torch.flagos.device and fn.current_stream is torch.flagos.current_stream
    from flag_gems.utils.device_info import get_device_capability
    assert get_device_capability() == (9, 0)  # the cuda target's, for its NVIDIA configs
    # its wrapper ran on flagos tensors and reached the HAL's Triton driver, which names
    # the missing target; the functional op then ran on the next provider
    torch.testing.assert_close(out.cpu(), a + b)
    text = " ".join(str(m.message) for m in w)
    assert "no Triton backend compiles for flagos:0 (HAL 'sim'" in text, text
    # its random kernels read flagos' generator as a Philox seed and offset
    from flag_gems.utils.random_utils import philox_backend_seed_offset
    torch.manual_seed(3)
    first = [philox_backend_seed_offset(8) for _ in range(2)]
    torch.manual_seed(3)
    assert [philox_backend_seed_offset(8) for _ in range(2)] == first
    assert first[0] != first[1] and first[0][1] == 0, first
print("ok")
"""


@pytest.mark.skipif(importlib.util.find_spec("flag_gems") is None,
                    reason="FlagGems is not installed")
def test_flag_gems_runs_with_torch_flagos_as_its_device_module(run_python) -> None:
    r = run_python(FLAG_GEMS_ON_FLAGOS, env={**NO_TWIN, "TRITON_INTERPRET": "0"})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_without_a_triton_target_gems_says_why(run_python) -> None:
    code = r"""
import flagos, torch
from flagos_ops_gems._flag_gems_device import vendor_for
from flagos_ops_gems import LibraryUnavailable
try:
    vendor_for(0)
except LibraryUnavailable as e:
    print(e)
"""
    r = run_python(code, env={**NO_TWIN, "TRITON_INTERPRET": "0"})
    assert "not available without a twin: flagos: no Triton backend compiles for flagos:0 " \
           "(HAL 'sim'" in r.stdout, r.stdout + r.stderr


FLAG_GEMS_ON_A_GPU_WITHOUT_TWIN = r"""
import flagos, torch
import torch.nn.functional as F

assert torch.flagos.get_device_properties(0).twin_device == "none"
g = torch.Generator().manual_seed(0)
a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
w = torch.randn(64, generator=g)
table, idx = torch.randn(100, 64, generator=g), torch.randint(0, 100, (16,), generator=g)
cases = {
    "add": lambda a, b, w, t, i: a + b, "mul": lambda a, b, w, t, i: a * b,
    "mm": lambda a, b, w, t, i: a @ b, "softmax": lambda a, b, w, t, i: a.softmax(-1),
    "layer_norm": lambda a, b, w, t, i: F.layer_norm(a, (64,), w),
    "rms_norm": lambda a, b, w, t, i: F.rms_norm(a, (64,), w),
    "sum": lambda a, b, w, t, i: a.sum(), "embedding": lambda a, b, w, t, i: F.embedding(i, t),
    "silu": lambda a, b, w, t, i: F.silu(a), "gelu": lambda a, b, w, t, i: F.gelu(a),
}
args = (a, b, w, table, idx)
on_flagos = tuple(x.to("flagos") for x in args)
with flagos.routing.override({"default": ["gems", "cpu"]}):
    for name, fn in cases.items():
        flagos.routing.reset_stats()
        out = fn(*on_flagos)
        served = {p for per in flagos.routing.stats().values() for p, s in per.items()
                  if s["calls"]}
        assert served == {"gems"}, (name, flagos.routing.stats())
        torch.testing.assert_close(out.cpu(), fn(*args), rtol=1e-4, atol=1e-4, msg=name)
import flag_gems
assert flag_gems.device == "flagos"
print("ok")
"""


@pytest.mark.skipif(os.environ.get("FLAGOS_TEST_HW") != "cuda" or
                    importlib.util.find_spec("flag_gems") is None,
                    reason="needs the cuda HAL and FlagGems")
def test_flag_gems_runs_on_a_gpu_without_its_twin(run_python) -> None:
    # The GPU as a chip without CUDA: FlagGems' kernels on flagos tensors, compiled for the
    # HAL's target and launched through the HAL, against the CPU.
    r = run_python(FLAG_GEMS_ON_A_GPU_WITHOUT_TWIN,
                   env={"FLAGOS_NO_TWIN": "1", "FLAGOS_HAL": "cuda", "TRITON_INTERPRET": "0"})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


PHILOX_DRAWS = r"""
import torch, flagos
from flagos_ops_gems._flag_gems_device import PhiloxDraws, draws_philox_seeds

gen = torch.Generator("flagos").manual_seed(11)
draws = PhiloxDraws(gen)
states = [draws.get_state().view(torch.int64).tolist() for _ in range(3)]
assert len({s[0] for s in states}) == 3 and {s[1] for s in states} == {0}, states
gen.manual_seed(11)
assert [draws.get_state().view(torch.int64).tolist() for _ in range(3)] == states
seen = []
kernel = draws_philox_seeds(lambda x, *, generator=None: seen.append(generator) or x)
kernel(1, generator=gen)
assert isinstance(seen[0], PhiloxDraws) and seen[0].generator is gen
kernel(1, generator=None)
assert seen[1] is None
print("ok")
"""


def test_a_flagos_generator_without_a_twin_reads_as_philox_seeds(run_python) -> None:
    # Without a twin flagos' generator has the CPU generator's state; FlagGems' random
    # kernels read a generator's state as Philox's seed and offset. Each read draws a new
    # seed from the flagos generator, which seeding reproduces.
    r = run_python(PHILOX_DRAWS, env=NO_TWIN)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
