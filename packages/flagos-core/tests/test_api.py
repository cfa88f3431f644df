"""torch.flagos: the everyday torch.cuda API, and torch.accelerator with flagos."""

from __future__ import annotations

import threading

import flagos
import pytest
import torch

F = torch.flagos


def test_module_is_registered_and_mirrors_flagos_api():
    assert torch.flagos is flagos.api
    assert torch._C._get_privateuse1_backend_name() == "flagos"
    for name in ["is_available", "device_count", "current_device", "set_device", "device",
                 "synchronize", "get_device_name", "get_device_properties", "Stream", "Event",
                 "current_stream", "default_stream", "stream", "manual_seed",
                 "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state",
                 "get_rng_state_all", "set_rng_state_all", "empty_cache", "memory_allocated",
                 "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "memory_stats", "memory_summary", "memory_snapshot", "mem_get_info",
                 "reset_peak_memory_stats", "get_amp_supported_dtype"]:
        assert callable(getattr(torch.flagos, name)), name
        assert name in flagos.api.__all__, name


def test_availability_and_count():
    assert F.is_available()
    assert F.is_initialized()
    n = F.device_count()
    assert n >= 1
    assert n == sum(h["device_count"] for h in flagos._C._hal_info())


def test_randn_on_flagos():
    x = torch.randn(4, 4, device="flagos")
    assert x.device.type == "flagos" and x.shape == (4, 4)
    y = x @ x
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())


def test_device_properties_and_name():
    for i in range(F.device_count()):
        p = F.get_device_properties(i)
        assert p.total_memory > 0
        assert p.multi_processor_count >= 1
        assert p.name == F.get_device_name(i) == F.get_device_name(f"flagos:{i}")
        assert p.hal in {h["name"] for h in flagos._C._hal_info()}
    with pytest.raises(ValueError, match="flagos device"):
        F.get_device_properties(F.device_count())
    with pytest.raises(ValueError, match="expected a flagos device"):
        F.get_device_properties("cpu")


def test_mem_get_info_is_consistent():
    free, total = F.mem_get_info(0)
    assert total == F.get_device_properties(0).total_memory
    assert 0 <= free <= total


def test_set_device_and_context(two_devices, device0):
    assert F.current_device() == 0
    F.set_device(1)
    assert F.current_device() == 1
    assert torch.empty(2, device="flagos").device == torch.device("flagos", 1)
    F.set_device("flagos:0")
    assert F.current_device() == 0
    with F.device(1):
        assert F.current_device() == 1
        assert torch.ones(1, device="flagos").device.index == 1
        with F.device(torch.device("flagos", 0)):
            assert F.current_device() == 0
        assert F.current_device() == 1
    assert F.current_device() == 0
    with pytest.raises(ValueError):
        F.set_device(F.device_count())


def test_current_device_is_per_thread(two_devices, device0):
    seen = []
    F.set_device(1)

    def other():
        seen.append(F.current_device())
        F.set_device(0)
        seen.append(F.current_device())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [0, 0]
    assert F.current_device() == 1


def test_multi_device_tensors_and_ops(two_devices):
    a = torch.arange(6.0, device="flagos:0")
    b = torch.arange(6.0, device="flagos:1")
    assert (a * 2).device.index == 0 and (b * 2).device.index == 1
    torch.testing.assert_close((b + 1).cpu(), torch.arange(6.0) + 1)
    torch.testing.assert_close(a.to("flagos:1").cpu(), b.cpu())


def test_synchronize_variants(two_devices):
    x = torch.randn(256, 256, device="flagos:1")
    y = x @ x
    F.synchronize()
    F.synchronize(1)
    F.synchronize("flagos:1")
    F.synchronize(torch.device("flagos", 0))
    assert y.shape == (256, 256)


def test_amp_supported_dtypes():
    assert torch.bfloat16 in F.get_amp_supported_dtype()
    assert torch.float16 in F.get_amp_supported_dtype()
    assert torch.amp.is_autocast_available("flagos")


def test_accelerator_is_flagos(two_devices):
    acc = torch.accelerator
    assert acc.is_available()
    assert acc.current_accelerator() == torch.device("flagos")
    assert acc.device_count() == F.device_count()
    prev = acc.current_device_index()
    try:
        acc.set_device_index(1)
        assert acc.current_device_index() == 1 == F.current_device()
        with acc.device_index(0):
            assert F.current_device() == 0
        assert F.current_device() == 1
    finally:
        acc.set_device_index(prev)
    s = F.Stream()
    acc.set_stream(s)
    try:
        assert acc.current_stream() == s
        assert F.current_stream() == s
    finally:
        acc.set_stream(F.default_stream())
    acc.synchronize()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")
    assert acc.memory_allocated() >= x.numel()
    assert acc.memory_allocated() == F.memory_allocated()
    assert acc.max_memory_allocated() >= acc.memory_allocated()
    assert acc.memory_reserved() == F.memory_reserved()
    stats = acc.memory_stats()
    assert stats["allocated_bytes.all.current"] == F.memory_allocated()
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == acc.memory_allocated()
    acc.empty_cache()
