"""What this installation of flagos sees, as data (:func:`collect`) and as the text of
``python -m flagos info`` (:func:`format_info`): loaded HALs and their versions, every
flagos device with its properties and memory, the installed op providers, and the active
routing table."""

from __future__ import annotations

from typing import Any

import torch

import flagos
from flagos import _C, _torch_support, routing


def _routing_rules() -> list[dict[str, Any]]:
    """The merged routing entries in force (shipped defaults, files, environment, set())."""
    return [{"hal": r.hal, "key": r.key, "chain": list(r.chain), "origin": r.origin}
            for r in routing.rules()]


def collect() -> dict[str, Any]:
    """Everything ``info`` reports, as plain data."""
    F = torch.flagos
    devices = []
    for i in range(F.device_count()):
        p = F.get_device_properties(i)
        free, _total = F.mem_get_info(i)
        devices.append({
            "index": i, "name": p.name, "hal": p.hal, "hal_device_index": p.hal_device_index,
            "total_memory": p.total_memory, "free_memory": free,
            "compute_units": p.multi_processor_count, "capability": f"{p.major}.{p.minor}",
            "native_device": p.native_device,
            "allocated": F.memory_allocated(i), "reserved": F.memory_reserved(i),
        })
    providers = []
    for name, p in sorted(routing.providers().items()):
        try:
            unavailable = p.unavailable_on(None)
        except Exception as e:  # noqa: BLE001 - info reports a broken provider, never fails
            unavailable = f"unavailable_on() raised {type(e).__name__}: {e}"
        providers.append({"name": name, "kind": "C++" if p.is_cpp else "Python",
                          "hals": None if p.hals is None else sorted(p.hals),
                          "module": type(p).__module__, "unavailable": unavailable,
                          "status": p.status_lines()})
    chains = {}
    for i in range(F.device_count()):
        chains[f"flagos:{i}"] = routing.resolve("aten::mm", i)
    return {
        "flagos": flagos.__version__, "torch": torch.__version__,
        "built_with_torch": _torch_support.built_with(),
        "torch_warnings": _torch_support.support_warnings(torch.__version__),
        "allocator": "passthrough" if _C._allocator_passthrough() else "caching",
        "profiler_device_activity": _C._profiler_device_activity(),
        "hals": _C._hal_info(), "devices": devices, "providers": providers,
        "routing": {"version": routing.version(), "rules": _routing_rules(),
                    "aten::mm": chains},
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def format_info(info: dict[str, Any]) -> str:
    """The human-readable report of :func:`collect`'s data."""
    out = [f"flagos {info['flagos']} on torch {info['torch']} ({info['allocator']} allocator)",
           ]
    if info["built_with_torch"]:
        out.append(f"  (flagos-core compiled against torch {info['built_with_torch']})")
    out += [f"  warning: {w}" for w in info["torch_warnings"]]
    out.append("  torch.profiler: " + (
        "device activity recorded (ProfilerActivity.PrivateUse1)"
        if info.get("profiler_device_activity") else
        "CPU timeline only (this torch has no PrivateUse1 profiler registry; 2.13 has it)"))
    out += ["", "HALs:"]
    for i, h in enumerate(info["hals"]):
        out.append(f"  [{i}] {h['name']} {h['version']} (ABI {h['abi_version']}), "
                   f"{h['device_count']} device(s): {h['path']}")
        out.append("      extensions: " + (", ".join(h.get("extensions", [])) or "none")
                   + (" (torch.flagos.Graph)" if "stream capture" in h.get("extensions", [])
                      else ""))
    if not info["hals"]:
        out.append("  none loaded")
    out += ["", "Devices:"]
    for d in info["devices"]:
        out.append(f"  flagos:{d['index']}  {d['name']}  HAL {d['hal']} device "
                   f"{d['hal_device_index']}  {d['compute_units']} compute units  "
                   f"capability {d['capability']}  native twin: {d['native_device']}")
        out.append(f"      memory: {_mib(d['total_memory'])} total, {_mib(d['free_memory'])} "
                   f"free; this process: {_mib(d['allocated'])} allocated, "
                   f"{_mib(d['reserved'])} reserved")
    if not info["devices"]:
        out.append("  none")
    out += ["", "Op providers:"]
    width = max([10, *(len(p["name"]) for p in info["providers"])])
    for p in info["providers"]:
        hals = "all HALs" if p["hals"] is None else ", ".join(p["hals"])
        out.append(f"  {p['name']:<{width}} {p['kind']:<7} on {hals}  ({p['module']})")
        if p.get("unavailable"):
            out.append(f"      {p['unavailable']}")
        out += [f"      {line}" for line in p.get("status", [])]
    r = info["routing"]
    out += ["", f"Routing table (version {r['version']}):"]
    for rule in r["rules"]:
        where = f"[hal.{rule['hal']}] " if rule["hal"] else ""
        out.append(f"  {where}{rule['key']} = {', '.join(rule['chain'])}    # {rule['origin']}")
    for dev, chain in r["aten::mm"].items():
        out.append(f"  aten::mm on {dev}: {' -> '.join(chain)}")
    out.append("  (flagos.routing.explain('aten::<op>') tells why for any op)")
    return "\n".join(out)
