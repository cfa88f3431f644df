"""Concurrency stress: threads run ops on shared and private flagos tensors while others
change routes, record events on side streams and empty the cache. Every result equals the
CPU's, and everything finishes in bounded time (a watchdog dumps every thread on a hang)."""

from __future__ import annotations

import faulthandler
import threading
import time

import flagos
import torch

DEV = torch.device("flagos", 0)
SECONDS = 3.0  # how long the threads keep going
DEADLINE_S = 120.0  # a thread still running then is a deadlock


def _worker(shared_cpu: torch.Tensor, shared: torch.Tensor, seed: int, errors: list,
            stop: threading.Event, counts: dict) -> None:
    g = torch.Generator().manual_seed(seed)
    n = 0
    while not stop.is_set():
        a = torch.randn(32, 32, generator=g)
        priv = a.to(DEV)
        out = (shared @ priv + priv).relu_().sum(dim=0)  # matmul, add, in-place, reduction
        ref = (shared_cpu @ a + a).relu_().sum(dim=0)
        if not torch.allclose(out.cpu(), ref, rtol=1e-4, atol=1e-4):
            errors.append(f"worker {seed}: result differs from the CPU at iteration {n}")
            return
        n += 1
    counts[seed] = n


def _router(stop: threading.Event, counts: dict) -> None:
    n = 0
    specs = ["aten::mm=cpu;aten::add.Tensor=cpu", "aten::mm=boxing,cpu", "aten::relu_=cpu"]
    while not stop.is_set():
        with flagos.routing.override(specs[n % len(specs)]):
            time.sleep(0.002)
        flagos.routing.set(specs[(n + 1) % len(specs)])
        n += 1
    counts["router"] = n


def _streams(errors: list, stop: threading.Event, counts: dict) -> None:
    n = 0
    side = torch.flagos.Stream()
    x = torch.arange(1024, dtype=torch.float32, device=DEV)
    while not stop.is_set():
        ready, done = torch.flagos.Event(), torch.flagos.Event(enable_timing=True)
        ready.record()
        side.wait_event(ready)
        with torch.flagos.stream(side):
            y = x * 2
            done.record(side)
        torch.flagos.current_stream().wait_event(done)
        y.record_stream(torch.flagos.current_stream())
        total = (y + 1).sum().item()
        if total != 2 * 1023 * 1024 / 2 + 1024:
            errors.append(f"side-stream result {total} at iteration {n}")
            return
        n += 1
    counts["streams"] = n


def _cache(stop: threading.Event, counts: dict) -> None:
    n = 0
    while not stop.is_set():
        torch.flagos.empty_cache()
        time.sleep(0.001)
        n += 1
    counts["empty_cache"] = n


def test_ops_routes_streams_and_empty_cache_concurrently():
    shared_cpu = torch.randn(32, 32, generator=torch.Generator().manual_seed(7))
    shared = shared_cpu.to(DEV)
    errors: list[str] = []
    counts: dict = {}
    stop = threading.Event()
    threads = [threading.Thread(target=_worker, args=(shared_cpu, shared, s, errors, stop, counts))
               for s in range(3)]
    threads += [threading.Thread(target=_router, args=(stop, counts)),
                threading.Thread(target=_streams, args=(errors, stop, counts)),
                threading.Thread(target=_cache, args=(stop, counts))]
    faulthandler.dump_traceback_later(DEADLINE_S, exit=True)
    try:
        for t in threads:
            t.start()
        time.sleep(SECONDS)
        stop.set()
        for t in threads:
            t.join(DEADLINE_S)
        assert not any(t.is_alive() for t in threads), "a thread did not finish: deadlock"
    finally:
        stop.set()
        faulthandler.cancel_dump_traceback_later()
        flagos.routing.reset()
    assert not errors, errors
    # every thread made progress while the others ran
    assert all(counts.get(k, 0) > 0 for k in (0, 1, 2, "router", "streams", "empty_cache")), counts
    assert torch.equal(shared.cpu(), shared_cpu)  # the shared input was only read
