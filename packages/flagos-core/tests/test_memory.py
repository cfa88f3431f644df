"""The caching device allocator: statistics, reuse, record_stream, empty_cache, OOM,
and the pass-through mode."""

from __future__ import annotations

import gc

import torch

F = torch.flagos
MiB = 1 << 20


def _settle() -> None:
    gc.collect()
    F.synchronize()


def test_stats_track_live_tensors(device0):
    _settle()
    base = F.memory_allocated()
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="flagos")
    assert F.memory_allocated() - base >= 3 * MiB
    assert F.memory_reserved() >= F.memory_allocated()
    assert F.max_memory_allocated() >= F.memory_allocated()
    stats = F.memory_stats()
    assert stats["allocation.all.current"] >= 1
    assert stats["requested_bytes.all.current"] >= 3 * MiB
    assert stats["allocated_bytes.large_pool.current"] >= 3 * MiB
    del x
    assert F.memory_allocated() == base
    assert F.memory_stats()["allocated_bytes.all.freed"] >= 3 * MiB


def test_small_and_large_pools(device0):
    _settle()
    s0 = F.memory_stats()
    small = torch.empty(1000, dtype=torch.uint8, device="flagos")
    large = torch.empty(2 * MiB, dtype=torch.uint8, device="flagos")
    s1 = F.memory_stats()
    assert s1["allocated_bytes.small_pool.current"] - s0["allocated_bytes.small_pool.current"] \
        == 1024  # rounded up to 512-byte multiples
    assert s1["allocated_bytes.large_pool.current"] - s0["allocated_bytes.large_pool.current"] \
        == 2 * MiB
    del small, large


def test_reset_peak_keeps_live_counters(device0):
    _settle()
    keep = torch.empty(MiB, dtype=torch.uint8, device="flagos")
    tmp = torch.empty(8 * MiB, dtype=torch.uint8, device="flagos")
    del tmp
    live = F.memory_allocated()
    reserved = F.memory_reserved()
    before = F.memory_stats()
    assert F.max_memory_allocated() >= live + 8 * MiB
    F.reset_peak_memory_stats()
    after = F.memory_stats()
    assert F.memory_allocated() == live
    assert F.memory_reserved() == reserved
    assert F.max_memory_allocated() == live
    assert F.max_memory_reserved() == reserved
    for key in ("allocation.all.current", "segment.all.current", "active.all.current",
                "allocated_bytes.all.allocated", "allocated_bytes.all.freed"):
        assert after[key] == before[key], key
    F.reset_accumulated_memory_stats()
    acc = F.memory_stats()
    assert acc["allocated_bytes.all.allocated"] == 0
    assert acc["allocated_bytes.all.current"] == live
    del keep


def test_memory_returns_to_start_after_1000_steps(device0):
    _settle()
    start = F.memory_allocated()
    w = torch.randn(32, 32, device="flagos")
    for i in range(1000):
        x = torch.randn(16, 32, device="flagos")
        y = (x @ w).relu_().sum(dim=0)
        if i % 100 == 0:
            y.cpu()
    del x, y, w
    _settle()
    assert F.memory_allocated() == start


def test_cached_block_is_reused(device0):
    _settle()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="flagos")
    ptr = x.data_ptr()
    del x
    allocs = F.memory_stats()["num_device_alloc"]
    y = torch.empty(4 * MiB, dtype=torch.uint8, device="flagos")
    assert y.data_ptr() == ptr
    assert F.memory_stats()["num_device_alloc"] == allocs


def test_split_blocks_merge_back(device0):
    F.empty_cache()
    _settle()
    a = torch.empty(2 * MiB, dtype=torch.uint8, device="flagos")
    b = torch.empty(2 * MiB, dtype=torch.uint8, device="flagos")
    seg = [s for s in F.memory_snapshot()
           if s["address"] <= a.data_ptr() < s["address"] + s["total_size"]]
    assert len(seg) == 1 and seg[0]["total_size"] == 20 * MiB  # 1-10 MiB requests share 20 MiB
    assert b.data_ptr() == a.data_ptr() + 2 * MiB  # split from the same segment
    del a, b
    seg = next(s for s in F.memory_snapshot() if s["address"] == seg[0]["address"])
    assert seg["allocated_size"] == 0
    assert [blk["size"] for blk in seg["blocks"]] == [20 * MiB]  # merged into one free block
    c = torch.empty(12 * MiB, dtype=torch.uint8, device="flagos")  # fits only merged
    assert c.data_ptr() == seg["address"]


def test_empty_cache_returns_memory(device0):
    _settle()
    x = torch.empty(16 * MiB, dtype=torch.uint8, device="flagos")
    del x
    reserved = F.memory_reserved()
    free_before, _ = F.mem_get_info()
    F.empty_cache()
    assert F.memory_reserved() <= reserved - 16 * MiB
    free_after, _ = F.mem_get_info()
    assert free_after >= free_before + 16 * MiB


def test_record_stream_delays_reuse(device0):
    _settle()
    side = F.Stream()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="flagos")
    ptr = x.data_ptr()
    x.record_stream(side)
    # Queue long work on the side stream so its event cannot have completed yet.
    src = torch.empty(256 * MiB, dtype=torch.uint8).pin_memory()
    big = torch.empty(256 * MiB, dtype=torch.uint8, device="flagos")
    with F.stream(side):
        big.copy_(src, non_blocking=True)
    active = F.memory_stats()["active_bytes.all.current"]
    del x
    assert F.memory_stats()["active_bytes.all.current"] == active  # free deferred
    y = torch.empty(4 * MiB, dtype=torch.uint8, device="flagos")
    assert y.data_ptr() != ptr  # still in use by `side`
    side.synchronize()
    z = torch.empty(512, dtype=torch.uint8, device="flagos")  # processes completed events
    # y (4 MiB) and z (512 B) came, x's 4 MiB went back to the pool
    assert F.memory_stats()["active_bytes.all.current"] == active + 512
    w = torch.empty(4 * MiB, dtype=torch.uint8, device="flagos")
    assert w.data_ptr() == ptr  # reusable once the side stream's work is done
    del big, src, y, z, w
    _settle()


def test_memory_summary_and_snapshot(device0):
    x = torch.empty(MiB, dtype=torch.uint8, device="flagos")
    text = F.memory_summary()
    assert "flagos:0" in text and "Allocated memory" in text and "OOMs" in text
    snap = F.memory_snapshot()
    assert any(s["address"] <= x.data_ptr() < s["address"] + s["total_size"]
               and s["allocated_size"] >= MiB for s in snap)
    assert sum(s["total_size"] for s in snap if s["device"] == 0) == F.memory_reserved(0)
    del x


def test_every_flagos_tensor_is_counted_per_device(two_devices):
    _settle()
    base = [F.memory_allocated(i) for i in range(2)]
    x = torch.empty(MiB, dtype=torch.uint8, device="flagos:1")
    assert F.memory_allocated(1) - base[1] == MiB
    assert F.memory_allocated(0) == base[0]
    del x


OOM_CODE = r"""
import torch, flagos
F = torch.flagos
MiB = 1 << 20
keep = torch.empty(40 * MiB, dtype=torch.uint8, device="flagos")
try:
    torch.empty(48 * MiB, dtype=torch.uint8, device="flagos")
except torch.OutOfMemoryError as e:
    print("MSG", str(e).splitlines()[0])
else:
    raise SystemExit("no OOM")
print("OOMS", F.memory_stats()["num_ooms"], F.memory_stats()["num_alloc_retries"])
# Cached memory is freed and the request retried before giving up.
del keep
x = torch.empty(48 * MiB, dtype=torch.uint8, device="flagos")
x.fill_(7)
print("AFTER", int(x.sum().item()), F.memory_allocated())
y = torch.randn(64, 64, device="flagos")
print("MATH", bool(torch.allclose((y @ y).cpu(), y.cpu() @ y.cpu(), atol=1e-4)))
"""


def test_oom_on_capped_device(run_python, sim_only):
    out = run_python(OOM_CODE, env={"FLAGOS_HAL": "sim", "FLAGOS_SIM_MEMORY": "64MiB"}).stdout
    msg = next(line for line in out.splitlines() if line.startswith("MSG"))
    assert "flagos:0" in msg
    assert "tried to allocate 48.00 MiB" in msg
    assert "40.00 MiB allocated" in msg
    assert "reserved" in msg
    assert "64.00 MiB device capacity" in msg
    assert "OOMS 1 1" in out
    assert f"AFTER {7 * 48 * MiB} {48 * MiB}" in out
    assert "MATH True" in out


PASSTHROUGH_CODE = r"""
import torch, flagos
F = torch.flagos
assert flagos._C._allocator_passthrough()
print("BACKEND", F.get_allocator_backend())
s0 = F.memory_stats()
x = torch.empty(3000, dtype=torch.uint8, device="flagos")
s1 = F.memory_stats()
print("ALLOC", s1["allocated_bytes.all.current"] - s0["allocated_bytes.all.current"],
      s1["num_device_alloc"] - s0["num_device_alloc"])
del x
y = torch.empty(3000, dtype=torch.uint8, device="flagos")
print("AGAIN", F.memory_stats()["num_device_alloc"] - s0["num_device_alloc"])
del y
s2 = F.memory_stats()
print("FREED", s2["allocated_bytes.all.current"] - s0["allocated_bytes.all.current"],
      s2["reserved_bytes.all.current"] - s0["reserved_bytes.all.current"])
z = torch.arange(10.0, device="flagos")
print("SUM", (z * 2).sum().item())
"""


def test_passthrough_mode(run_python, sim_only):
    out = run_python(PASSTHROUGH_CODE,
                     env={"FLAGOS_HAL": "sim", "FLAGOS_ALLOCATOR": "passthrough"}).stdout
    assert "BACKEND passthrough" in out
    assert "ALLOC 3072 1" in out  # counted, one HAL allocation per request
    assert "AGAIN 2" in out  # nothing cached: a second HAL allocation
    assert "FREED 0 0" in out
    assert "SUM 90.0" in out


def test_recently_freed_small_blocks_are_reused_exactly_and_merge_back(device0):
    """Freed small blocks are parked whole for an exact-size request; parking more than
    the allocator keeps merges the oldest back, also into a neighbour parked right then."""
    F.empty_cache()
    _settle()
    start = F.memory_allocated()
    xs = [torch.empty(1024, dtype=torch.uint8, device="flagos") for _ in range(40)]
    p = xs[5].data_ptr()
    xs[5] = None
    again = torch.empty(1024, dtype=torch.uint8, device="flagos")
    assert again.data_ptr() == p  # the parked block, taken back whole
    # Park xs[1], then enough others to make it the oldest, then its neighbour xs[2]:
    # evicting xs[1] must not merge xs[2] away while xs[2] is being parked.
    xs[1] = None
    for i in range(10, 25):
        xs[i] = None
    xs[2] = None
    live = [x for x in xs if x is not None] + [again]
    live += [torch.empty(1024, dtype=torch.uint8, device="flagos") for _ in range(30)]
    assert len({x.data_ptr() for x in live}) == len(live)  # no block handed out twice
    for i, x in enumerate(live):
        x.fill_(i % 251)
    assert all(int(x[0]) == i % 251 for i, x in enumerate(live))
    assert F.memory_allocated() == start + 1024 * len(live)
    del xs, live, again, x
    _settle()
    assert F.memory_allocated() == start
    for seg in F.memory_snapshot():
        if seg["allocated_size"] == 0:  # fully free segments are one merged block
            assert len(seg["blocks"]) == 1
