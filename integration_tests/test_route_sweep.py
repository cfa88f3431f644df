"""The route sweep (route_sweep.py) on the HAL under test: every provider alone, the CPU
fallback, the shipped defaults and every shipped routing file run a training step that
matches the CPU or raise an error naming the op; no route crashes or hangs the process.
The routes of one kind of memory run at once, one process each."""

from __future__ import annotations

import json
import os

import pytest
import route_sweep


@pytest.mark.parametrize("memory", sorted(route_sweep.MEMORY))
def test_every_route_runs_or_names_the_op(memory):
    jobs = max(2, min(8, (os.cpu_count() or 2) // 2))
    outcomes = route_sweep.sweep([memory], jobs)
    if os.environ.get("FLAGOS_ROUTE_SWEEP_JSON"):  # the table for docs/benchmarks.md
        with open(f"{os.environ['FLAGOS_ROUTE_SWEEP_JSON']}-{memory}.json", "w") as f:
            json.dump(route_sweep.report(outcomes, [memory]), f, indent=1)
    assert len(outcomes) >= 4, route_sweep.table(outcomes)  # defaults, cpu, boxing, a file
    bad = [f"{o.case} ({o.memory}): {o.outcome}: {o.detail}" for o in outcomes
           if o.outcome not in route_sweep.GOOD]
    assert not bad, route_sweep.table(outcomes) + "\n\n" + "\n\n".join(bad)
