"""``zoo_run.py --shadow``: every routed op call of a model checked against torch's CPU
kernels on copies of its inputs; on a correct device none mismatches."""

from __future__ import annotations

import os
import re

import pytest
from zoo_cases import CASES
from zoo_check import run_in_process


def test_every_op_call_of_a_model_matches_the_cpu() -> None:
    name = "GPT-2"
    pytest.importorskip(CASES[name].library)
    proc, _ = run_in_process(name, "shadow", dict(os.environ), "--shadow")
    found = re.search(r"ZOO-SHADOW GPT-2: (\d+) calls checked, (\d+) \(op, provider\) pairs",
                      proc.stdout)
    assert proc.returncode == 0 and found, f"{proc.stdout}\n{proc.stderr}"
    checked, mismatched = int(found[1]), int(found[2])
    assert checked > 200 and mismatched == 0, proc.stdout
