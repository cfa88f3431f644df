"""The native device benchmarks measure flagos against (flagos.bench.native_reference):
the twin, or without a twin the device the HAL names as addressing its memory."""

from __future__ import annotations

import flagos
import pytest
import torch
from flagos.bench import native_reference


def test_with_a_twin_it_is_the_twin() -> None:
    from flagos.bench_results import environment

    twin = flagos.twin_device(0)
    if twin is None:
        pytest.skip("flagos:0 has no twin here")
    assert native_reference(0) == twin
    # the results name it, and the GPU it is, as the machine
    env = environment()
    assert env["native"] == str(twin)
    if twin.type == "cuda":
        assert env["machine"] == torch.cuda.get_device_name(twin)
    else:
        assert env["machine"].endswith(" cores")


REFERENCE = """
import flagos
from flagos.bench import native_reference
from flagos.bench_results import environment
assert flagos.get_device_properties(0).twin_device == "none"
assert environment()["native"] == (str(native_reference(0)) if native_reference(0) else None)
print("reference", native_reference(0))
"""


def test_without_a_twin_it_is_the_device_the_hal_names(run_python) -> None:
    hal = torch.flagos.get_device_properties(0).hal
    r = run_python(REFERENCE, env={"FLAGOS_NO_TWIN": "1", "FLAGOS_HAL": hal})
    got = r.stdout.strip().rpartition("reference ")[2]
    # cuda: the GPU the HAL drives; sim: its memory is host memory, the CPU addresses it
    assert got.startswith("cuda:") if hal == "cuda" else got == "cpu", r.stdout + r.stderr
