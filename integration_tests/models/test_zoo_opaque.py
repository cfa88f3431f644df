"""A subset of the zoo with FLAGOS_NO_HOST_ALIAS=1: every HAL counts as opaque, so ops
take the staged CPU-fallback paths of a vendor whose memory the host cannot address.
The variable is read when flagos loads: each case runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from zoo_cases import CASES
from zoo_check import RESULTS

OPAQUE = ["Llama", "BERT (padding mask)", "UNet2DModel"]


@pytest.mark.parametrize("name", OPAQUE)
def test_model_matches_cpu_on_opaque_memory(name: str) -> None:
    pytest.importorskip(CASES[name].library)
    env = dict(os.environ, FLAGOS_NO_HOST_ALIAS="1")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("zoo_run.py")), "--mode", "opaque", name],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    records = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
               if line.startswith("ZOO-RESULT ")]
    RESULTS.extend(records)
    assert proc.returncode == 0 and records and records[0]["status"] == "pass", (
        f"{name} on opaque memory failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr}")
