"""The route sweep (route_sweep.py) on the HAL under test: every provider alone, the CPU
fallback, the shipped defaults and every shipped routing file run a training step that
matches the CPU or raise an error naming the op; no route crashes or hangs the process."""

from __future__ import annotations

import os

import pytest
import route_sweep


def _memories() -> list[str]:
    # Opaque memory is what a chip without a twin has; on sim both kinds are cheap.
    return sorted(route_sweep.MEMORY)


@pytest.mark.parametrize("case", route_sweep.cases(_memories()), ids=lambda c: f"{c.name}-{c.memory}")
def test_route_runs_or_names_the_op(case):
    import flagos

    outcome = route_sweep.run_case(case, sorted(flagos.routing.providers()),
                                   timeout=float(os.environ.get("FLAGOS_ROUTE_SWEEP_TIMEOUT", "400")))
    assert outcome.outcome in route_sweep.GOOD, f"{outcome.outcome}: {outcome.detail}"
