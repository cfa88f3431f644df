"""Pinned host memory over HAL host malloc."""

from __future__ import annotations

import flagos
import pytest
import torch

F = torch.flagos


def _skip_unless_flagos_pinned(t: torch.Tensor) -> None:
    """With a CUDA twin in the process torch pins through CUDA's host allocator (it asks
    the CUDA hooks before PrivateUse1's), whose caching is CUDA's own, not flagos'."""
    if not flagos._C._is_pinned_ptr(t.data_ptr()):
        pytest.skip("pin_memory() took the twin's (CUDA's) pinned allocator in this process")


def test_pin_memory_and_is_pinned():
    x = torch.arange(1000.0)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    assert torch.equal(p, x)
    assert p[10:].is_pinned()  # a pointer inside the block is pinned too
    assert torch.empty(16, pin_memory=True).is_pinned()
    assert p.pin_memory().data_ptr() == p.data_ptr()  # already pinned: no copy


def test_pinned_block_is_cached_and_released():
    p = torch.empty(1 << 16, dtype=torch.uint8).pin_memory()
    _skip_unless_flagos_pinned(p)
    ptr = p.data_ptr()
    del p
    q = torch.empty(1 << 16, dtype=torch.uint8).pin_memory()
    assert q.data_ptr() == ptr
    del q
    F.empty_cache()
    assert not flagos._C._is_pinned_ptr(ptr)


def test_dataloader_pin_memory():
    ds = torch.utils.data.TensorDataset(torch.arange(20.0), torch.arange(20))
    dl = torch.utils.data.DataLoader(ds, batch_size=8, pin_memory=True)
    batches = list(dl)
    assert len(batches) == 3
    for xb, yb in batches:
        assert xb.is_pinned() and yb.is_pinned()
        d = xb.to("flagos", non_blocking=True)
        F.synchronize()
        assert torch.equal(d.cpu(), xb)


def test_non_blocking_round_trip_through_pinned():
    src = torch.randn(1 << 20).pin_memory()
    dev = src.to("flagos", non_blocking=True)
    back = torch.empty_like(src).pin_memory()
    back.copy_(dev, non_blocking=True)
    F.current_stream().synchronize()
    assert torch.equal(back, src)


def test_pinned_block_not_reused_while_copy_in_flight():
    busy_src = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    busy_dst = torch.empty(256 << 20, dtype=torch.uint8, device="flagos")
    src = torch.full((128 << 20,), 4, dtype=torch.uint8).pin_memory()
    _skip_unless_flagos_pinned(src)
    ptr = src.data_ptr()
    dst = torch.empty(128 << 20, dtype=torch.uint8, device="flagos")
    busy_dst.copy_(busy_src, non_blocking=True)  # keeps the stream busy
    dst.copy_(src, non_blocking=True)
    del src  # the queued copy still reads it
    other = torch.empty(128 << 20, dtype=torch.uint8).pin_memory()
    if not F.current_stream().query():
        # Still copying after `other` was allocated, so it was while it was: the block
        # must not have been reused. (A fast GPU may finish first; sim never does.)
        assert other.data_ptr() != ptr
    F.synchronize()
    if other.data_ptr() != ptr:  # else the copy had ended and `other` reused the block
        again = torch.empty(128 << 20, dtype=torch.uint8).pin_memory()
        assert again.data_ptr() == ptr  # free again once the copy is done
    assert int(dst[-1]) == 4
