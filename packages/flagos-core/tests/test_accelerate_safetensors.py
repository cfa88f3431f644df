"""accelerate's safetensors readers wrapped for flagos devices (flagos/_accelerate_safetensors.py):
a read for a flagos device happens on the CPU and lands on the device; any other device's
read is the library's own, unchanged; wrapping twice wraps once."""

from __future__ import annotations

import types

import torch
from flagos import _accelerate_safetensors


class _Handle:
    def __init__(self, device: str) -> None:
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def get_tensor(self, name: str) -> torch.Tensor:
        assert self.device == "cpu" or self.device.startswith("cuda"), self.device
        return torch.full((2,), 3.0)

    def keys(self) -> list[str]:
        return ["w"]


def _module(calls: list) -> types.ModuleType:
    m = types.ModuleType("fake_accelerate_loader")

    def safe_open(filename, framework, device="cpu"):
        calls.append(("open", device))
        return _Handle(device)

    def safe_load_file(filename, device="cpu"):
        calls.append(("load", device))
        return {"w": torch.full((2,), 3.0)}

    m.safe_open, m.safe_load_file = safe_open, safe_load_file
    return m


def test_reads_for_a_flagos_device_happen_on_the_cpu_and_land_on_the_device() -> None:
    calls: list = []
    m = _module(calls)
    _accelerate_safetensors.adapt(m)
    _accelerate_safetensors.adapt(m)  # once
    with m.safe_open("f.safetensors", framework="pt", device="flagos:0") as f:
        assert f.keys() == ["w"]
        w = f.get_tensor("w")
    assert w.device == torch.device("flagos", 0) and torch.equal(w.cpu(), torch.full((2,), 3.0))
    loaded = m.safe_load_file("f.safetensors", device="flagos:0")
    assert loaded["w"].device == torch.device("flagos", 0)
    assert calls == [("open", "cpu"), ("load", "cpu")]


def test_other_devices_read_as_the_library_does() -> None:
    calls: list = []
    m = _module(calls)
    _accelerate_safetensors.adapt(m)
    with m.safe_open("f.safetensors", framework="pt", device="cuda:1") as f:
        assert isinstance(f, _Handle)
    m.safe_load_file("f.safetensors", device="cuda:1")
    assert calls == [("open", "cuda:1"), ("load", "cuda:1")]


def test_a_device_index_is_the_current_accelerators() -> None:
    # accelerate's device maps name devices by index: 0 is flagos:0 where flagos is the
    # current accelerator (sim), cuda:0 where torch has CUDA
    calls: list = []
    m = _module(calls)
    _accelerate_safetensors.adapt(m)
    loaded = m.safe_load_file("f.safetensors", device=0)
    on_flagos = torch.device(0).type == "flagos"
    assert calls == [("load", "cpu" if on_flagos else 0)]
    if on_flagos:
        assert loaded["w"].device == torch.device("flagos", 0)
