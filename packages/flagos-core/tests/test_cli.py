"""``python -m flagos info``."""

from __future__ import annotations

import json

import flagos
import pytest
import torch
from flagos import routing
from flagos.__main__ import main


def test_info_text(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for h in flagos._C._hal_info():
        assert h["version"] in out and h["path"] in out and h["abi_version"] in out
        assert "extensions: " + (", ".join(h["extensions"]) or "none") in out
    sim = [h for h in flagos._C._hal_info() if h["name"] == "sim"]
    if sim:  # the sim has every optional extension
        assert sim[0]["extensions"] == ["graph runtime", "kernels", "stream capture", "host tasks"]
    for i in range(torch.flagos.device_count()):
        assert f"flagos:{i}  {torch.flagos.get_device_name(i)}" in out
    assert "memory:" in out and "MiB total" in out
    for name in routing.providers():
        assert name in out
    assert "Routing table (version" in out and "aten::mm on flagos:0:" in out


def test_info_json_matches_runtime(capsys):
    x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos:0")
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["devices"]) == torch.flagos.device_count()
    d0 = data["devices"][0]
    assert d0["total_memory"] == torch.flagos.get_device_properties(0).total_memory
    assert d0["allocated"] >= x.numel()
    assert {p["name"] for p in data["providers"]} == set(routing.providers())
    assert data["routing"]["aten::mm"]["flagos:0"] == routing.resolve("aten::mm", 0)
    assert any(r["key"] == "default" for r in data["routing"]["rules"])
    assert data["allocator"] == "caching"


def test_info_reflects_routing_changes(capsys):
    with routing.override("aten::mm=cpu"):
        main(["info", "--json"])
        data = json.loads(capsys.readouterr().out)
    assert data["routing"]["aten::mm"]["flagos:0"] == ["cpu"]
    assert any(r["key"] == "aten::mm" and r["chain"] == ["cpu"] for r in data["routing"]["rules"])


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "info" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bogus"])
