"""Every zoo model on the configured HAL (sim in CI) matches the same model on the CPU."""

from __future__ import annotations

import pytest
from zoo_cases import CASES
from zoo_check import run_case


@pytest.mark.parametrize("name", list(CASES))
def test_model_matches_cpu(name: str) -> None:
    case = CASES[name]
    pytest.importorskip(case.library)
    run_case(case)
