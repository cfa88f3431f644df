"""The native provider exists for HALs with opaque memory: these tests run the sim HAL
with FLAGOS_NO_TWIN=1 (set here, before torch loads flagos, as is FLAGOS_HAL=sim), so that nothing reaches
device memory from the host and boxing (which needs a twin) is out of every chain."""

from __future__ import annotations

import os

os.environ["FLAGOS_NO_TWIN"] = "1"
os.environ["FLAGOS_HAL"] = "sim"  # simk's HAL, also in a run for another HAL (tests(hw='cuda'))

import flagos
import pytest


@pytest.fixture(autouse=True)
def _restore_routes():
    yield
    flagos.routing.reset()
    flagos.routing.reset_stats()


@pytest.fixture
def native_first():
    """Every op's chain is native -> cpu; the counters start at zero."""
    assert flagos.get_device_properties(0).twin_device == "none", \
        "these tests need FLAGOS_NO_TWIN=1 set before flagos loads"
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["native"]}):
        yield
