"""Device activity in torch.profiler: routed ops, HAL copies and memsets on a device
timeline, timed by HAL events, linked to the CPU ops that issued them, with the provider
that served each op; and torch's per-op device-time fallback on HAL events."""

from __future__ import annotations

import json

import flagos
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

needs_device_activity = pytest.mark.skipif(
    not flagos._C._profiler_device_activity(),
    reason="this torch has no PrivateUse1 profiler registry (torch 2.13 has it): flagos ops "
           "show on the CPU timeline only")

PROGRAM = """
import json, torch, flagos
from torch.profiler import ProfilerActivity, profile
x = torch.randn(128, 128, device="flagos")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    y = (x @ x).relu().sum()
    host = torch.randn(4096).to("flagos").cpu()
    torch.zeros(4096, device="flagos")
    torch.flagos.synchronize()
prof.export_chrome_trace(sys.argv[1])
avg = {e.key: e.self_device_time_total for e in prof.key_averages()}
print(json.dumps(avg))
"""


def _run(run_python, tmp_path, env: dict) -> tuple[dict, list[dict]]:
    trace = tmp_path / "trace.json"
    r = run_python(PROGRAM.replace("sys.argv[1]", repr(str(trace))), env=env)
    averages = json.loads(r.stdout.strip().splitlines()[-1])
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    return averages, events


@needs_device_activity
@pytest.mark.parametrize("memory", ["host", "opaque"])
def test_ops_copies_and_memsets_on_the_device_timeline(run_python, tmp_path, memory):
    env = {"FLAGOS_NO_TWIN": "1"} if memory == "opaque" else {}
    averages, events = _run(run_python, tmp_path, env)
    kernels = [e for e in events if e["cat"] == "kernel"]
    cpu_ops = {e["args"]["External id"]: e for e in events if e["cat"] == "cpu_op"
               and "External id" in e.get("args", {})}
    # each routed op's span names the provider that served it and links to its CPU op
    mm = [e for e in kernels if e["name"].startswith("aten::mm")]
    assert mm and all(e["name"].endswith(f"[{e['args']['provider']}]") for e in kernels)
    for e in kernels:
        op = cpu_ops[e["args"]["correlation"]]
        assert e["name"].startswith(op["name"]), (e["name"], op["name"])
        assert e["dur"] >= 0 and e["ts"] >= op["ts"] - 1.0
    # key_averages: the CPU op gets the device time of what it issued
    assert averages["aten::mm"] > 0
    assert any(k.startswith("aten::mm") and k.endswith("]") and v > 0 for k, v in averages.items())
    memsets = [e for e in events if e["cat"] == "gpu_memset"]
    assert memsets and memsets[0]["args"]["bytes"] == 4096 * 4
    if memory == "opaque":  # copies are HAL copies (on host memory they are CPU copies)
        copies = {e["name"]: e for e in events if e["cat"] == "gpu_memcpy"}
        assert {"Memcpy HtoD", "Memcpy DtoH"} <= set(copies)
        assert copies["Memcpy HtoD"]["args"]["bytes"] == 4096 * 4


@needs_device_activity
def test_a_cpu_only_profile_records_no_device_activity() -> None:
    x = torch.randn(64, 64, device="flagos")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).sum().item()
    assert all(e.device_type != torch.device("flagos").type or e.device_time_total == 0
               for e in prof.events())
    assert not [e for e in prof.events() if e.name.endswith("]")]


def test_the_per_op_fallback_times_ops_with_hal_events() -> None:
    # torch's fallback records an event pair around every op (every supported torch)
    x = torch.randn(128, 128, device="flagos")
    with torch.autograd.profiler.profile(use_device="flagos", use_kineto=False) as prof:
        (x @ x).relu().sum().cpu()
    by_name = {e.key: e for e in prof.key_averages()}
    mm = by_name["aten::mm"]
    assert mm.count == 1 and 0 < mm.self_device_time_total < 60e6  # microseconds
    assert all(0 <= e.self_device_time_total < 60e6 for e in by_name.values())


@needs_device_activity
def test_a_declining_provider_leaves_no_span(run_python, tmp_path) -> None:
    # the op's span names the provider that ran it, not one that declined before it
    code = """
import json, torch, flagos
from flagos import routing
from flagos.routing import Provider
from torch.profiler import ProfilerActivity, profile

class Declines(Provider):
    def serves(self, op):
        return op.startswith("aten::neg")
    def __call__(self, op, args, kwargs):
        return NotImplemented

routing.register_provider(Declines("declines"))
routing.set("aten::neg=declines,cpu")
x = torch.randn(64, device="flagos")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    torch.neg(x)
    torch.flagos.synchronize()
print(json.dumps(sorted(e.name for e in prof.events() if e.name.endswith("]"))))
"""
    names = json.loads(run_python(code).stdout.strip().splitlines()[-1])
    assert names and all(n.startswith("aten::neg") and n.endswith("[cpu]") for n in names), names
