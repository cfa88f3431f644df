"""The model zoo: unchanged Transformers and Diffusers models on flagos against the CPU.

Set FLAGOS_ZOO_RESULTS=PATH to write every check's differences as JSON (zoo_table.py
renders them as the table in docs/models.md)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny configs only: nothing is downloaded
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from zoo_check import RESULTS


@pytest.fixture(autouse=True, scope="session")
def full_fp32_on_cuda_twins():
    """The zoo compares with the CPU at fp32 tolerances; cuDNN's default TF32 convolutions
    (and TF32 matmuls where enabled) differ by ~1e-3 per layer."""
    # The cudnn flags through their context manager: torch's OpInfo test helpers (imported
    # by the OpInfo tests collected beside these) freeze plain assignment.
    cudnn = torch.backends.cudnn
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark,
                     deterministic=cudnn.deterministic, allow_tf32=False):
        yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("FLAGOS_ZOO_RESULTS")
    if path and RESULTS:
        Path(path).write_text(json.dumps(RESULTS, indent=1) + "\n")
