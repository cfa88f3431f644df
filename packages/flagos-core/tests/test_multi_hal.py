"""Two HALs side by side in one process: flagos:0..3 span both, copies cross them."""

from __future__ import annotations

CODE = r"""
import torch, flagos
F = torch.flagos
hals = flagos._C._hal_info()
print("HALS", len(hals), [h["device_count"] for h in hals])
print("COUNT", F.device_count())
paths = [F.get_device_properties(i).hal_path for i in range(F.device_count())]
local = [F.get_device_properties(i).hal_device_index for i in range(F.device_count())]
print("SPAN", int(paths[0] == paths[1]), int(paths[2] == paths[3]), int(paths[1] != paths[2]),
      local)
x = torch.arange(24.0).reshape(4, 6)
ok = True
for s in range(4):
    a = x.to(f"flagos:{s}")
    for d in range(4):
        b = a.to(f"flagos:{d}")
        c = torch.empty(6, 4, device=f"flagos:{d}", dtype=torch.float64)
        c.copy_(a.t())
        e = torch.zeros(4, 12, device=f"flagos:{d}")[:, ::2]
        e.copy_(a)
        ok &= torch.equal(b.cpu(), x) and torch.equal(c.cpu(), x.t().double())
        ok &= torch.equal(e.cpu(), x) and b.device.index == d
print("COPIES", int(ok))
y = torch.randn(16, 16, device="flagos:3")
print("MATH", int(torch.allclose((y @ y).cpu(), y.cpu() @ y.cpu(), atol=1e-5)))
with F.device(2):
    s = F.Stream()
    with F.stream(s):
        z = torch.ones(8, device="flagos") * 3
    s.synchronize()
print("STREAM", s.device_index, z.device.index, z.sum().item())
big = torch.empty(1 << 20, dtype=torch.uint8, device="flagos:2")
print("MEM", F.memory_allocated(2) >= (1 << 20), F.memory_allocated(0) < (1 << 20))
"""


def _check(out: str) -> None:
    assert "HALS 2 [2, 2]" in out
    assert "COUNT 4" in out
    assert "SPAN 1 1 1 [0, 1, 0, 1]" in out
    assert "COPIES 1" in out
    assert "MATH 1" in out
    assert "STREAM 2 2 24.0" in out
    assert "MEM True True" in out


def test_two_hals(run_python, sim_copy, sim_only):
    _check(run_python(CODE, env={"FLAGOS_HAL": f"sim,{sim_copy}"}).stdout)


def test_two_hals_staged(run_python, sim_copy, sim_only):
    """The same with opaque memory: every copy across HALs is staged through the host."""
    out = run_python(CODE, env={"FLAGOS_HAL": f"sim,{sim_copy}", "FLAGOS_NO_TWIN": "1",
                                "FLAGOS_ROUTES": "default=cpu"}).stdout
    _check(out)
