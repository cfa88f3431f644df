"""A short memory soak (memory_soak.py; the 1,000-step run is in docs/faults.md): after
warm-up, allocated and reserved bytes, HAL free bytes, live streams and events are flat."""

from __future__ import annotations

import os

import memory_soak


def test_training_memory_is_flat_after_warmup():
    r = memory_soak.soak(steps=120, every=25)
    assert len(r["snapshots"]) >= 4
    growth = dict(r["growth"])
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("FLAGOS_HAL") == "cuda":
        # The GPU's free bytes are the whole device's: other test workers use it meanwhile.
        # This process's own bytes (allocated, reserved) still must not grow.
        growth.pop("hal_free")
    assert all(v == 0 for v in growth.values()), (r["growth"], r["snapshots"])
