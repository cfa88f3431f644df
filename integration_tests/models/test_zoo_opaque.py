"""A subset of the zoo with FLAGOS_NO_TWIN=1: every HAL counts as opaque, so ops
take the staged CPU-fallback paths of a vendor whose memory the host cannot address.
The variable is read when flagos loads: each case runs in a process of its own."""

from __future__ import annotations

import os

import pytest
from zoo_cases import CASES
from zoo_check import run_in_process

OPAQUE = ["Llama", "BERT (padding mask)", "UNet2DModel", "QwenImage21 transformer",
          "QwenImage21Pipeline (condition image)"]


@pytest.mark.parametrize("name", OPAQUE)
def test_model_matches_cpu_on_opaque_memory(name: str) -> None:
    pytest.importorskip(CASES[name].library)
    proc, record = run_in_process(name, "opaque", dict(os.environ, FLAGOS_NO_TWIN="1"))
    assert proc.returncode == 0 and record and record["status"] == "pass", (
        f"{name} on opaque memory failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr}")
