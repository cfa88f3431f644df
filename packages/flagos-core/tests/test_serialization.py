"""torch.save / torch.load of flagos tensors, storages and state_dicts."""

from __future__ import annotations

import io

import pytest
import torch

F = torch.flagos


def _round_trip(obj: object, **load_kwargs: object) -> object:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_tensor_round_trip_keeps_device_and_values(two_devices):
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        x = (torch.arange(12) % 3).to(dtype).reshape(3, 4).to("flagos:1")
        y = _round_trip(x)
        assert y.device == torch.device("flagos", 1) and y.dtype == dtype
        assert torch.equal(y.cpu(), x.cpu())


def test_views_share_storage_after_load():
    base = torch.arange(10.0, device="flagos")
    a, b = _round_trip([base, base[3:7]])
    assert b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    b.fill_(-1)
    assert a[3:7].cpu().tolist() == [-1.0] * 4


def test_state_dict_map_location_both_ways(two_devices):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("flagos")
    sd = model.state_dict()
    on_cpu = _round_trip(sd, map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu.values())
    assert all(torch.equal(on_cpu[k], v.cpu()) for k, v in sd.items())
    moved = _round_trip(sd, map_location={"flagos:0": "flagos:1"})
    assert all(v.device == torch.device("flagos", 1) for v in moved.values())
    as_device = _round_trip(sd, map_location=torch.device("flagos", 1))
    assert all(v.device.index == 1 for v in as_device.values())
    safe = _round_trip(sd, weights_only=True)
    assert all(v.device == torch.device("flagos", 0) for v in safe.values())
    # CPU checkpoint loaded onto flagos, into a model on flagos.
    cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    onto = _round_trip(cpu_model.state_dict(), map_location="flagos")
    assert all(v.device.type == "flagos" for v in onto.values())
    model.load_state_dict(onto)
    x = torch.randn(5, 4)
    cpu_model.eval()
    model.eval()
    torch.testing.assert_close(model(x.to("flagos")).cpu(), cpu_model(x))


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_storage_round_trip():
    s = torch.arange(6, dtype=torch.int32, device="flagos").untyped_storage()
    t = _round_trip(s)
    assert t.device.type == "flagos"
    assert bytes(t.cpu()) == bytes(s.cpu())
