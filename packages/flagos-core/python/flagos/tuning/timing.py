"""Timing op calls on a flagos device with the HAL's events.

A measurement runs a call back to back in batches between two events recorded on the
current stream (``torch.flagos.Event(enable_timing=True)``): the time per call of a batch
is what the device took, including any time it waited for the host to issue the next
call, which is what a provider with a slow host path costs a model. Warm-up batches run
first (kernel compilation, caches); then several timed batches give the median time per
call and its spread (the interquartile range of the batches).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Timing", "time_call"]


@dataclass(frozen=True)
class Timing:
    """Median microseconds per call, the spread (interquartile range, us) of the batches,
    and how the measurement was made."""

    median_us: float
    spread_us: float
    batches: int
    calls_per_batch: int


def _batch_ms(fn: Callable[[], object], n: int, device: int,
              before: Callable[[], object] | None) -> float:
    if before is not None:
        before()
    start = torch.flagos.Event(enable_timing=True)
    end = torch.flagos.Event(enable_timing=True)
    with torch.flagos.device(device):
        start.record()
        for _ in range(n):
            fn()
        end.record()
    end.synchronize()
    return start.elapsed_time(end)


def time_call(fn: Callable[[], object], device: int, *, warmup: int = 3, reps: int = 10,
              target_ms: float = 2.0, max_calls: int = 200,
              before: Callable[[], object] | None = None) -> Timing:
    """Time ``fn`` (one op call on flagos device ``device``). The batch size is chosen so
    that a batch takes about ``target_ms`` (at most ``max_calls`` calls); ``before`` runs
    ahead of every batch, outside the timed part (to restore inputs an in-place op
    changes)."""
    ms = _batch_ms(fn, 1, device, before)  # first call: compiles, warms caches
    for _ in range(max(warmup - 1, 0)):
        ms = _batch_ms(fn, 1, device, before)
    n = max(1, min(max_calls, int(target_ms / max(ms, 1e-4))))
    per_call = sorted(_batch_ms(fn, n, device, before) * 1000.0 / n for _ in range(max(reps, 1)))
    if len(per_call) >= 4:
        q = statistics.quantiles(per_call, n=4)
        spread = q[2] - q[0]
    else:
        spread = per_call[-1] - per_call[0]
    return Timing(statistics.median(per_call), spread, len(per_call), n)
