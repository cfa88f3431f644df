"""flagos' device spec for transformers' own test suite (flagos.transformers_test_device):
with it, ``transformers.testing_utils`` runs its tests on flagos and its device-agnostic
helpers seed, empty and count flagos devices."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

CHECK = r"""
import torch
from transformers import testing_utils as tu

assert tu.torch_device == "flagos", tu.torch_device
tu.backend_manual_seed(tu.torch_device, 7)
a = torch.randn(5, device=tu.torch_device)
tu.backend_manual_seed(tu.torch_device, 7)
b = torch.randn(5, device=tu.torch_device)
tu.backend_manual_seed(tu.torch_device, 8)
c = torch.randn(5, device=tu.torch_device)
assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(a.cpu(), c.cpu())
assert tu.backend_device_count(tu.torch_device) == torch.flagos.device_count() == 3
tu.backend_empty_cache(tu.torch_device)
assert tu.BACKEND_EMPTY_CACHE["flagos"] is torch.flagos.empty_cache  # the spec's, not None

@tu.require_torch_accelerator
def needs_an_accelerator():
    return "ran"

assert needs_an_accelerator() == "ran"
print("ok")
"""


def test_transformers_testing_utils_run_on_flagos_with_its_spec(tmp_path) -> None:
    # run as transformers' tests are: from the directory the spec file is written into;
    # three sim devices, which transformers' default count (1) would not report
    if os.environ.get("FLAGOS_HAL", "sim") != "sim":
        pytest.skip("counts three sim devices")
    spec = subprocess.run([sys.executable, "-m", "flagos.transformers_test_device"],
                          capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    assert (tmp_path / spec).is_file()
    env = {**os.environ, "TRANSFORMERS_TEST_DEVICE": "flagos",
           "TRANSFORMERS_TEST_DEVICE_SPEC": spec, "FLAGOS_SIM_DEVICES": "3"}
    r = subprocess.run([sys.executable, "-c", CHECK], check=False, capture_output=True, text=True,
                       env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
