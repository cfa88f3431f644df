import shutil

import flagos_hal
import pytest
from flagos_hal import discovery


def test_default_is_sim_without_devices_elsewhere(monkeypatch):
    monkeypatch.delenv("FLAGOS_HAL", raising=False)
    try:
        cuda_devices = flagos_hal.load("cuda").device_count()
    except (flagos_hal.HalError, FileNotFoundError, ValueError):
        cuda_devices = 0  # not built, or no driver
    specs = flagos_hal.discover()
    if cuda_devices:  # a GPU machine: cuda wins, sim is not added
        assert [s.name for s in specs] == ["cuda"]
        return
    assert [s.name for s in specs] == ["sim"]
    assert specs[0].path == flagos_hal.library_path("sim") and specs[0].origin.startswith("default")


def test_env_names_and_paths_in_order(monkeypatch, tmp_path, sim_path):
    other = tmp_path / "libflagos_hal_other.so"
    shutil.copy(sim_path, other)
    monkeypatch.setenv("FLAGOS_HAL", f"{other}, sim,,sim")
    specs = flagos_hal.discover()
    assert [(s.name, s.path) for s in specs] == [("other", str(other)), ("sim", sim_path)]
    assert all(s.origin.startswith("FLAGOS_HAL") for s in specs)
    assert [flagos_hal.load(s.path).name for s in specs] == ["sim", "sim"]


def test_unknown_name_lists_available(monkeypatch):
    monkeypatch.setenv("FLAGOS_HAL", "sim,warp_drive")
    with pytest.raises(ValueError, match=r"unknown HAL 'warp_drive'.*available HALs: .*sim"):
        flagos_hal.discover()


def test_missing_path(monkeypatch, tmp_path):
    monkeypatch.setenv("FLAGOS_HAL", str(tmp_path / "libnope.so"))
    with pytest.raises(ValueError, match="libnope.so.*does not exist"):
        flagos_hal.discover()


class _FakeEntryPoint:
    def __init__(self, name, fn):
        self.name, self._fn, self.value, self.dist = name, fn, f"fake:{name}", None

    def load(self):
        return self._fn


def test_entry_point_with_devices_wins_over_sim(monkeypatch, tmp_path, sim_path):
    monkeypatch.delenv("FLAGOS_HAL", raising=False)
    copy = tmp_path / "libflagos_hal_vendor.so"
    shutil.copy(sim_path, copy)  # a "vendor" HAL with 2 devices

    def broken():
        raise RuntimeError("plugin exploded")

    fakes = {"sim": _FakeEntryPoint("sim", lambda: sim_path),
             "vendor": _FakeEntryPoint("vendor", lambda: str(copy)),
             "broken": _FakeEntryPoint("broken", broken)}
    monkeypatch.setattr(discovery, "_entry_points", lambda: fakes)
    with pytest.warns(RuntimeWarning, match="broken.*plugin exploded"):
        specs = flagos_hal.discover()
    assert [s.name for s in specs] == ["vendor"]


def test_load_by_name_and_unknown():
    assert flagos_hal.load("sim").name == "sim"
    with pytest.raises(ValueError, match="unknown HAL 'nope'"):
        flagos_hal.load("nope")
