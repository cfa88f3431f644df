"""A short memory soak (memory_soak.py; the 1,000-step run is in docs/faults.md): after
warm-up, allocated and reserved bytes, HAL free bytes, live streams and events are flat."""

from __future__ import annotations

import memory_soak


def test_training_memory_is_flat_after_warmup():
    r = memory_soak.soak(steps=120, every=25)
    assert len(r["snapshots"]) >= 4
    assert all(v == 0 for v in r["growth"].values()), (r["growth"], r["snapshots"])
