"""``zoo_run.py --shadow``: every routed op call of a model checked against torch's CPU
kernels on copies of its inputs; on a correct device none mismatches."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from zoo_cases import CASES


def test_every_op_call_of_a_model_matches_the_cpu() -> None:
    name = "GPT-2"
    pytest.importorskip(CASES[name].library)
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("zoo_run.py")),
                           "--shadow", name], capture_output=True, text=True, timeout=300,
                          check=False)
    found = re.search(r"ZOO-SHADOW GPT-2: (\d+) calls checked, (\d+) \(op, provider\) pairs",
                      proc.stdout)
    assert proc.returncode == 0 and found, f"{proc.stdout}\n{proc.stderr}"
    checked, mismatched = int(found[1]), int(found[2])
    assert checked > 200 and mismatched == 0, proc.stdout
