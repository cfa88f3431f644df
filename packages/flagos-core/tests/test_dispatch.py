"""The routing dispatcher: run-time route changes, Python providers, autograd through every
route, exception safety, threads, FLAGOS_LOG_DISPATCH, and the op shapes the CPU fallback
and twin engines must get right (views, out=, lists, optional lists, several outputs,
Device/Generator/dtype arguments, CPU scalars, empty and complex tensors, sparse refused)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import flagos
import pytest
import torch
from flagos import _C
from flagos.routing import Provider
from torch.utils._pytree import tree_map

DEV = "flagos:0"


def _ensure_twin() -> None:
    """The core's twin engine as a provider named "twin" (the boxing package's engine)."""
    if "twin" in flagos.routing.providers():
        return

    class Twin(Provider):
        name = "twin"
        is_cpp = True

    _C._register_provider("twin", "twin")
    flagos.routing.register_provider(Twin())


ROUTES = ["cpu", "twin"]


class CpuPy(Provider):
    """A Python provider that runs ops on the CPU (copies), honouring out=/in-place args.
    Records every call; declines the ops in `decline`."""

    def __init__(self, name: str, ops: set[str], decline: frozenset[str] = frozenset()) -> None:
        super().__init__(name)
        self.ops = ops
        self.decline = decline
        self.calls: list[str] = []
        self.fail_with: Exception | None = None

    def serves(self, op: str) -> bool:
        return any(op == o or op.startswith(o + ".") for o in self.ops)

    def __call__(self, op, args, kwargs):
        name = op.name()
        if any(name == d or name.startswith(d + ".") for d in self.decline):
            self.calls.append("declined " + name)
            return NotImplemented
        self.calls.append(name)
        if self.fail_with is not None:
            raise self.fail_with
        dev = next(t.device for t in _flat((args, kwargs)) if t.device.type == "flagos")

        def cpu(x):
            return x.detach().cpu() if isinstance(x, torch.Tensor) else x

        cargs, ckwargs = tree_map(cpu, args), tree_map(cpu, kwargs)
        out = op(*cargs, **ckwargs)
        # Mutated arguments (out=, in-place): write the CPU values back into the caller's.
        schema = op._schema
        written = {}
        for i, a in enumerate(schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                src = ckwargs.get(a.name) if a.kwarg_only or i >= len(args) else cargs[i]
                dst = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
                if dst.shape != src.shape:
                    dst.resize_(src.shape)
                dst.copy_(src)
                written[id(src)] = dst

        def back(x):
            if isinstance(x, torch.Tensor):
                return written[id(x)] if id(x) in written else x.to(dev)
            return x

        return tree_map(back, out)


def _flat(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for e in x:
            yield from _flat(e)
    elif isinstance(x, dict):
        for e in x.values():
            yield from _flat(e)


def _calls(op: str, provider: str) -> int:
    return flagos.routing.stats().get(op, {}).get(provider, {}).get("calls", 0)


@pytest.fixture(autouse=True)
def _clean_routes():
    _ensure_twin()
    yield
    flagos.routing.reset()


# ------------------------------------------------------------------ run-time routing


def test_route_switch_takes_effect_on_next_call():
    a = torch.randn(8, 8, device=DEV)
    probe = CpuPy("probe_switch", {"aten::relu"})
    flagos.routing.register_provider(probe)
    flagos.routing.reset_stats()
    flagos.routing.set({"aten::relu": "cpu"})
    torch.relu(a)
    assert _calls("aten::relu", "cpu") == 1
    flagos.routing.set({"aten::relu": ["probe_switch", "cpu"]})
    r = torch.relu(a)
    assert _calls("aten::relu", "probe_switch") == 1
    assert _calls("aten::relu", "cpu") == 1
    assert probe.calls == ["aten::relu"]
    torch.testing.assert_close(r.cpu(), torch.relu(a.cpu()))
    with flagos.routing.override({"aten::relu": "twin"}):
        torch.relu(a)
        assert _calls("aten::relu", "twin") == 1
    torch.relu(a)  # the override is gone: back to the python provider
    assert _calls("aten::relu", "probe_switch") == 2


def test_python_provider_serves_its_ops_and_declines_others():
    probe = CpuPy("probe_decline", {"aten::relu", "aten::sin"}, decline=frozenset({"aten::sin"}))
    flagos.routing.register_provider(probe)
    flagos.routing.reset_stats()
    a = torch.randn(5, device=DEV)
    with flagos.routing.override({"default": ["probe_decline", "cpu"]}):
        assert flagos.routing.resolve("aten::relu", 0) == ["probe_decline", "cpu"]
        # cos is not served at all: its chain skips the provider
        assert flagos.routing.resolve("aten::cos.out", 0) == ["cpu"]
        r, s, c = torch.relu(a), torch.sin(a), torch.cos(a)
    torch.testing.assert_close(r.cpu(), torch.relu(a.cpu()))
    torch.testing.assert_close(s.cpu(), torch.sin(a.cpu()))
    torch.testing.assert_close(c.cpu(), torch.cos(a.cpu()))
    assert "aten::relu" in probe.calls
    # sin arrives as its out= overload, or as itself where an installed provider has it
    # routed as itself (flagos-ops-gems does); declined as itself, it runs its composite
    # kernel, whose out= call the provider declines in turn: the CPU fallback serves that.
    sin = "aten::sin" if "declined aten::sin" in probe.calls else "aten::sin.out"
    assert f"declined {sin}" in probe.calls
    st = flagos.routing.stats()
    assert st[sin]["probe_decline"]["declined"] == 1
    assert st["aten::sin.out"]["cpu"]["calls"] == 1
    assert st["aten::relu"]["probe_decline"]["calls"] == 1
    assert "probe_decline" not in st.get("aten::cos.out", {})


# ------------------------------------------------------------------ autograd


@pytest.mark.parametrize("route", ["cpu", "twin", "python"])
def test_autograd_through_every_route(route):
    if route == "python":
        probe = CpuPy("probe_grad", {"aten::relu", "aten::threshold_backward", "aten::mm",
                                     "aten::mul", "aten::sum"})
        flagos.routing.register_provider(probe)
        spec = {"default": ["probe_grad", "cpu"]}
    else:
        spec = {"default": [route]}
    torch.manual_seed(0)
    xc = torch.randn(6, 4, requires_grad=True)
    wc = torch.randn(4, 3, requires_grad=True)
    x = xc.detach().to(DEV).requires_grad_()
    w = wc.detach().to(DEV).requires_grad_()
    flagos.routing.reset_stats()
    with flagos.routing.override(spec):
        loss = (torch.relu(x @ w) * 2).sum()
        loss.backward()
    (torch.relu(xc @ wc) * 2).sum().backward()
    torch.testing.assert_close(loss.detach().cpu(), (torch.relu(xc @ wc) * 2).sum().detach())
    torch.testing.assert_close(x.grad.cpu(), xc.grad)
    torch.testing.assert_close(w.grad.cpu(), wc.grad)
    assert x.grad.device.type == "flagos"
    st = flagos.routing.stats()
    name = "probe_grad" if route == "python" else route

    def calls(op):  # a structured op arrives functional (fast kernels) or as its out= form
        return sum(s.get(name, {}).get("calls", 0) for k, s in st.items()
                   if k in (f"aten::{op}", f"aten::{op}.out", f"aten::{op}.grad_input"))

    assert calls("threshold_backward") >= 1
    assert calls("mm") >= 3  # forward, and both gradients
    if route == "python":
        assert any(c.startswith("aten::threshold_backward") for c in probe.calls)


# ------------------------------------------------------------------ exception safety


def _snapshot(*ts):
    return [(t.data_ptr(), t.shape, t.stride(), t.storage_offset(), t.cpu().clone()) for t in ts]


@pytest.mark.parametrize("route", ROUTES)
def test_failing_kernel_leaves_inputs_unchanged(route):
    a = torch.randn(4, 4, device=DEV)
    b = torch.randn(3, 5, device=DEV)
    out = torch.randn(2, 2, device=DEV).to(torch.int64)
    idx = torch.tensor([0, 7], device=DEV)
    before = _snapshot(a, b, out, idx)
    with flagos.routing.override({"default": [route]}):
        with pytest.raises(RuntimeError, match="cannot be multiplied|size mismatch|shapes"):
            torch.mm(a, b)
        with pytest.raises(RuntimeError, match="can't be cast|result type"):
            torch.add(a, a, out=out)
        with pytest.raises(RuntimeError, match="size|shape"):
            a.add_(b)
        with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
            torch.cat([a, b], 0)
        after = _snapshot(a, b, out, idx)
        for (p0, s0, st0, o0, v0), (p1, s1, st1, o1, v1) in zip(before, after):
            assert (p0, s0, st0, o0) == (p1, s1, st1, o1)
            assert torch.equal(v0, v1)
        # the device is still usable
        r = a @ a
    torch.testing.assert_close(r.cpu(), a.cpu() @ a.cpu())


def test_failing_python_provider_leaves_inputs_and_device_usable():
    probe = CpuPy("probe_fail", {"aten::relu"})
    probe.fail_with = ValueError("kernel exploded")
    flagos.routing.register_provider(probe)
    a = torch.randn(4, device=DEV)
    before = a.cpu().clone()
    with flagos.routing.override({"aten::relu": ["probe_fail", "cpu"]}):
        with pytest.raises(RuntimeError, match="probe_fail|kernel exploded"):
            torch.relu(a)
        probe.fail_with = None
        torch.testing.assert_close(torch.relu(a).cpu(), torch.relu(before))
    assert torch.equal(a.cpu(), before)


# ------------------------------------------------------------------ threads


def test_threads_changing_routes_while_others_run_ops():
    probe = CpuPy("probe_threads", {"aten::mm", "aten::add"})
    flagos.routing.register_provider(probe)
    torch.manual_seed(0)
    a_cpu, b_cpu = torch.randn(32, 32), torch.randn(32, 32)
    expect = a_cpu @ b_cpu + a_cpu
    a, b = a_cpu.to(DEV), b_cpu.to(DEV)
    stop = threading.Event()
    errors: list[BaseException] = []
    results = [0]

    def worker():
        try:
            while not stop.is_set():
                r = (a @ b + a).cpu()
                torch.testing.assert_close(r, expect)
                results[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            stop.set()

    def switcher():
        chains = [["cpu"], ["twin"], ["probe_threads", "cpu"], ["twin", "cpu"]]
        try:
            for i in range(200):
                if stop.is_set():
                    break
                if i % 3 == 0:
                    with flagos.routing.override({"default": chains[i % 4]}):
                        pass
                else:
                    flagos.routing.set({"aten::mm": chains[i % 4], "aten::add": chains[(i + 1) % 4]})
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()

    flagos.routing.reset_stats()
    threads = [threading.Thread(target=worker) for _ in range(3)] + [threading.Thread(target=switcher)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]
    assert results[0] > 0
    used = {p for per_op in flagos.routing.stats().values() for p in per_op}
    assert len(used & {"cpu", "twin", "probe_threads"}) >= 2


# ------------------------------------------------------------------ logging


def test_log_dispatch_logs_each_decision_once():
    code = textwrap.dedent("""
        import torch, flagos
        a = torch.randn(4, device="flagos")
        for _ in range(3):
            torch.relu(a)
        for _ in range(2):
            torch.sin(a)
        flagos.routing.set("aten::relu=cpu")
        torch.relu(a); torch.relu(a)
        print("done")
    """)
    env = dict(os.environ, FLAGOS_LOG_DISPATCH="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(flagos.__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=False,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("[flagos.routing]")]
    relu = [ln for ln in lines if "aten::relu on flagos:0" in ln]
    sin = [ln for ln in lines if "aten::sin.out on flagos:0" in ln]
    assert len(sin) == 1, lines
    # the first decision once, and the changed decision (from set()) once more
    assert len(relu) == 2 and "set()" in relu[1], lines


# ------------------------------------------------------------------ op shapes per engine


@pytest.mark.parametrize("route", ROUTES)
def test_op_shapes(route):
    torch.manual_seed(0)
    xc = torch.randn(4, 6)
    x = xc.to(DEV)
    with flagos.routing.override({"default": [route]}):
        # out= into a tensor of the wrong size: resized
        out = torch.empty(0, device=DEV)
        torch.mul(x, 2, out=out)
        assert out.shape == (4, 6)
        torch.testing.assert_close(out.cpu(), xc * 2)
        # in-place on a view writes through to the base
        y = x.clone()
        y[1:3].mul_(10)
        yc = xc.clone()
        yc[1:3].mul_(10)
        torch.testing.assert_close(y.cpu(), yc)
        # tensor lists in and out, several outputs
        torch.testing.assert_close(torch.cat([x, x], 1).cpu(), torch.cat([xc, xc], 1))
        v, i = torch.topk(x, 2)
        vc, ic = torch.topk(xc, 2)
        assert v.device.type == i.device.type == "flagos"
        torch.testing.assert_close((v.cpu(), i.cpu()), (vc, ic))
        parts = torch.unbind(x)
        assert all(p.device.type == "flagos" for p in parts)
        # optional tensor lists (advanced indexing with None)
        idx = torch.tensor([0, 2])
        torch.testing.assert_close(x[:, idx.to(DEV)].cpu(), xc[:, idx])
        z = x.clone()
        z.index_put_((idx.to(DEV),), torch.zeros(6, device=DEV))
        zc = xc.clone()
        zc.index_put_((idx,), torch.zeros(6))
        torch.testing.assert_close(z.cpu(), zc)
        # a 0-dim CPU tensor mixed with flagos tensors
        torch.testing.assert_close((x * torch.tensor(3.0)).cpu(), xc * 3)
        # Device, dtype and Generator arguments
        r = torch.arange(5, device=DEV, dtype=torch.float64)
        assert r.device.type == "flagos" and r.dtype == torch.float64
        g = torch.Generator(device=DEV)
        g.manual_seed(7)
        r1 = torch.randn(3, device=DEV, generator=g)
        g.manual_seed(7)
        r2 = torch.randn(3, device=DEV, generator=g)
        assert torch.equal(r1.cpu(), r2.cpu())
        # empty tensors
        e = torch.empty(0, 3, device=DEV)
        assert (e + 1).shape == (0, 3) and e.sum(0).shape == (3,)
        # complex, with lazy conjugation
        cc = torch.randn(3, 3, dtype=torch.complex64)
        c = cc.to(DEV)
        torch.testing.assert_close((c.conj() @ c).cpu(), cc.conj() @ cc)
        torch.testing.assert_close(c.conj().cpu(), cc.conj())
        torch.testing.assert_close(torch.fft.fft(x).cpu(), torch.fft.fft(xc))
        # convolution goes through the *_overrideable hooks
        w = torch.randn(2, 1, 3, 3)
        img = torch.randn(1, 1, 5, 5)
        torch.testing.assert_close(
            torch.nn.functional.conv2d(img.to(DEV), w.to(DEV)).cpu(),
            torch.nn.functional.conv2d(img, w))
        # sparse: refused with a clear error
        with pytest.raises(NotImplementedError, match="layout not supported|strided"):
            x.to_sparse()


def test_copying_path_writes_back_mutated_arguments():
    """FLAGOS_NO_TWIN=1: the cpu provider copies (as on opaque vendor memory); in-place,
    out= and BatchNorm's undeclared running-stat updates must still land on flagos."""
    code = textwrap.dedent("""
        import torch, flagos
        from flagos import _C
        torch.manual_seed(0)
        bn_c = torch.nn.BatchNorm1d(3)
        bn_f = torch.nn.BatchNorm1d(3).to("flagos")
        x = torch.randn(8, 3)
        bn_c(x); bn_f(x.to("flagos"))
        torch.testing.assert_close(bn_f.running_mean.cpu(), bn_c.running_mean)
        torch.testing.assert_close(bn_f.running_var.cpu(), bn_c.running_var)
        a = torch.randn(4, device="flagos"); ac = a.cpu()
        a.mul_(3); out = torch.empty(0, device="flagos"); torch.sin(a, out=out)
        torch.testing.assert_close(out.cpu(), torch.sin(ac * 3))
        print("ok", flagos.routing.resolve("aten::sin.out", 0))
    """)
    # The copying cpu provider itself: a vendor kernel library (native) would serve first.
    env = dict(os.environ, FLAGOS_NO_TWIN="1", FLAGOS_ROUTES="default=cpu")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(flagos.__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=False, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ok ['cpu']" in p.stdout


def test_repeated_calls_reuse_aliases_without_keeping_memory() -> None:
    """The twin engine's per-thread alias cache: results stay right when the same tensors
    come back, when one tensor is passed twice, when an out= tensor is resized, and when
    a freed storage's memory is handed out again; the cache holds no flagos memory."""
    dev = torch.device("flagos", 0)
    gc.collect()  # earlier tests' garbage must not be freed in the middle of this one
    torch.flagos.synchronize()
    start = torch.flagos.memory_allocated(0)
    a_cpu, b_cpu = torch.randn(16, 16), torch.randn(16, 16)
    a, b = a_cpu.to(dev), b_cpu.to(dev)
    out = torch.empty(16, 16, device=dev)
    for _ in range(3):
        torch.add(a, b, out=out)
        torch.testing.assert_close(out.cpu(), a_cpu + b_cpu)
        torch.testing.assert_close((a * a).cpu(), a_cpu * a_cpu)
    grow = torch.empty(0, device=dev)
    for n in (4, 64, 4):  # out= resized up (new storage) and down (same storage)
        torch.add(a.flatten()[:n], 1, out=grow)
        torch.testing.assert_close(grow.cpu(), a_cpu.flatten()[:n] + 1)
    for i in range(20):  # storages freed and reallocated at the same addresses
        x = torch.full((8, 8), float(i), device=dev)
        torch.testing.assert_close((x + 1).cpu(), torch.full((8, 8), i + 1.0))
        y = torch.full((4, 16), float(-i), device=dev)
        torch.testing.assert_close((y * 2).cpu(), torch.full((4, 16), -2.0 * i))
    del a, b, out, grow, x, y
    torch.flagos.synchronize()
    assert torch.flagos.memory_allocated(0) == start


def test_a_tensor_passed_twice_is_one_tensor_to_the_kernel() -> None:
    """add(x, y, out=x): natively the kernel sees that out is an input and refuses to resize
    it; the twin engine must hand it one alias for both, not two."""
    x_cpu, y_cpu = torch.ones(4), torch.ones(3, 4)
    with pytest.raises(RuntimeError) as native:
        torch.add(x_cpu, y_cpu, out=x_cpu)
    x, y = torch.ones(4, device=DEV), torch.ones(3, 4, device=DEV)
    with pytest.raises(RuntimeError) as routed:
        torch.add(x, y, out=x)
    assert str(routed.value).splitlines()[0] == str(native.value).splitlines()[0]
    assert x.shape == (4,) and x.cpu().tolist() == [1.0] * 4
    z = torch.arange(4.0, device=DEV)
    torch.mul(z, z, out=z)
    assert z.cpu().tolist() == [0.0, 1.0, 4.0, 9.0]


def test_an_operator_made_where_a_destroyed_one_was_has_routes_of_its_own():
    # torch may give a new operator the address of one it freed; the routes, counters and
    # kernels flagos keeps per operator are the new one's, not the destroyed one's.
    for i in range(20):
        old = torch.library.Library(f"flagos_test_reuse_old{i}", "DEF")
        old.define("f(Tensor x) -> Tensor")
        old.impl("f", lambda x: x + 1, "CPU")
        getattr(torch.ops, f"flagos_test_reuse_old{i}").f(torch.zeros(2, device="flagos"))
        old._destroy()
        new = torch.library.Library(f"flagos_test_reuse_new{i}", "DEF")
        new.define("f(Tensor x) -> Tensor")
        new.impl("f", lambda x: x + 2, "CPU")
        x = torch.zeros(2, device="flagos")  # made first: routed factories count too
        flagos.routing.reset_stats()
        out = getattr(torch.ops, f"flagos_test_reuse_new{i}").f(x)
        assert out.cpu().tolist() == [2.0, 2.0]
        assert list(flagos.routing.stats()) == [f"flagos_test_reuse_new{i}::f"]
        new._destroy()
