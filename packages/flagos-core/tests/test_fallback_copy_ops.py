"""The CPU fallback on opaque memory moves its arguments with _to_copy and copy_. Once a
kernel library serves those ops (FlagGems does), they are routed as themselves; routed
to the CPU fallback alone, they run their composite kernels (HAL copies), never the
fallback, which moves its arguments with them: that recursed until the stack ran out and
the process died."""

from __future__ import annotations

CODE = """
import torch, flagos
from flagos.provider_api import route_ops_as_themselves
route_ops_as_themselves(["aten::_to_copy", "aten::copy_"])
with flagos.routing.override({"default": ["cpu"]}):
    x = torch.randn(4, 5)
    y = x.to("flagos")                       # _to_copy to flagos, copy_ into flagos
    assert torch.equal(y.cpu(), x)           # _to_copy to the CPU
    y.copy_(x + 1)                           # copy_ from the host
    z = torch.empty(4, 5, device="flagos")
    z.copy_(y)                               # copy_ on the device
    w = (z * 2).double()                     # an op through cpu_fallback, then _to_copy
    assert torch.equal(w.cpu(), ((x + 1) * 2).double())
    ids = torch.tensor([0, 2, 2, 3], dtype=torch.int32, device="flagos")
    assert torch.histc(ids, bins=4, min=0, max=3).cpu().tolist() == [1, 0, 2, 1]
    # With no provider before the fallback, they run as their composite kernels.
    stats = flagos.routing.stats()
    assert "aten::_to_copy" not in stats and "aten::copy_" not in stats, stats
    assert "its composite kernel" in str(flagos.routing.explain("aten::_to_copy"))
print("ok")
"""


def test_copies_routed_to_the_cpu_fallback_on_opaque_memory(run_python):
    r = run_python(CODE, env={"FLAGOS_NO_TWIN": "1"}, check=False)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-3000:])


# A call that moves data between flagos and another device leaves the routes: on every
# route and memory kind it takes the op's composite kernel (the runtime's own copies).
# Routed, the sim's CPU twin served x.cpu() and its CPU result came back as a flagos tensor.
LEAVING = """
import torch, flagos
from flagos.provider_api import route_ops_as_themselves
route_ops_as_themselves(["aten::_to_copy", "aten::zeros_like", "aten::full_like", "aten::copy_"])
x = torch.randn(4, 5)
y = x.to("flagos")
for routes in ({}, {"default": ["cpu"]}):
    with flagos.routing.override(routes):
        for leaving in (y.cpu(), y.to("cpu", torch.float64), torch.zeros_like(y, device="cpu"),
                        torch.full_like(y, 2.0, device="cpu")):
            assert leaving.device.type == "cpu", (routes, leaving.device)
        assert torch.equal(y.cpu(), x) and torch.equal(y.double().cpu(), x.double())
        staying = (y.double(), torch.zeros_like(y), torch.full_like(y, 2.0, device="flagos"))
        assert all(t.device.type == "flagos" for t in staying), routes
        assert torch.equal(staying[2].cpu(), torch.full_like(x, 2.0))
        flagos.routing.reset_stats()
        host = torch.empty(4, 5)
        host.copy_(y)
        d = torch.empty(4, 5, device="flagos").copy_(x + 1)
        assert torch.equal(host, x) and torch.equal(d.cpu(), x + 1)
        assert "aten::copy_" not in flagos.routing.stats(), routes
        d.copy_(y)  # on the device: down the route, or as its composite kernel where
        # no provider before the CPU fallback is left (explain says which)
        composite = "its composite kernel" in str(flagos.routing.explain("aten::copy_"))
        assert ("aten::copy_" in flagos.routing.stats()) != composite, routes
        assert composite == (routes != {} or flagos.twin_device(0) is None), routes
        assert torch.equal(d.cpu(), x)
print("ok")
"""


def test_calls_leaving_flagos_take_the_composite_kernel(run_python):
    for env in ({}, {"FLAGOS_NO_TWIN": "1"}):
        r = run_python(LEAVING, env=env, check=False)
        assert r.returncode == 0 and "ok" in r.stdout, (env, r.returncode, r.stderr[-3000:])


# An op routed as itself whose providers before the CPU fallback all decline the call runs
# its composite kernel, not the fallback: its parts go down their own routes.
DECLINED = """
import torch, flagos
from flagos.provider_api import route_ops_as_themselves
route_ops_as_themselves(["aten::full"])

class Declines(flagos.routing.Provider):
    name = "declines_full"
    def serves(self, op): return op == "aten::full"
    def __call__(self, op, args, kwargs): return NotImplemented

flagos.routing.register_provider(Declines())
with flagos.routing.override({"aten::full": ["declines_full", "cpu"]}):
    flagos.routing.reset_stats()
    y = torch.full((4,), 2.0, device="flagos")
    stats = flagos.routing.stats()["aten::full"]
assert torch.equal(y.cpu(), torch.full((4,), 2.0))
assert stats["declines_full"]["declined"] == 1 and "cpu" not in stats, stats
print("ok")
"""


def test_a_declined_op_routed_as_itself_runs_its_composite_kernel(run_python):
    for env in ({}, {"FLAGOS_NO_TWIN": "1"}):
        r = run_python(DECLINED, env=env, check=False)
        assert r.returncode == 0 and "ok" in r.stdout, (env, r.returncode, r.stderr[-3000:])


# ATen takes a CPU scalar tensor beside device tensors, also as the first argument; the
# CPU fallback (torch's cpu_fallback) puts results on the first tensor argument's device.
SCALAR_FIRST = """
import torch, flagos
from flagos.provider_api import route_ops_as_themselves
route_ops_as_themselves(["aten::mul.Tensor"])  # the functional op reaches the fallback
x, y = torch.randn(6), torch.randn(6)
xf, yf = x.to("flagos"), y.to("flagos")
cond, half = torch.tensor(True), torch.tensor(0.5)
with flagos.routing.override({"default": ["cpu"]}):
    for got, want in ((torch.where(cond, xf, yf), torch.where(cond, x, y)),
                      (torch.where(~cond, xf, yf), torch.where(~cond, x, y)),
                      (half * xf, half * x), (xf * half, x * half)):
        assert got.device.type == "flagos", got.device
        assert torch.equal(got.cpu(), want)
    assert flagos.routing.stats()["aten::where.self"]["cpu"]["calls"] == 2
print("ok")
"""


def test_results_stay_on_flagos_when_a_cpu_scalar_comes_first(run_python):
    r = run_python(SCALAR_FIRST, env={"FLAGOS_NO_TWIN": "1"}, check=False)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-3000:])
