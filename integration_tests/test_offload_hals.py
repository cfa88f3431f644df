"""The offload backend (flagos-compile) on HALs that cannot take its graphs (flagos-hal's
wrapping test HAL around sim): one built against ABI 1.0, before the graph runtime, and
one whose runtime loads only a format no installed compiler writes. Both still run the
model, eagerly, and say why; strict mode raises."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import flagos_hal
import pytest

pytest.importorskip("onnxscript", reason="the offload backend exports with torch.onnx (flagos-compile[offload])")

ROOT = pathlib.Path(__file__).resolve().parents[1]
WRAP_SOURCE = ROOT / "packages" / "flagos-hal" / "tests" / "fake_graph" / "wrap_hal.c"


@pytest.fixture(scope="module")
def wrap_hal(tmp_path_factory) -> str:
    lib = tmp_path_factory.mktemp("wrap") / "libflagos_hal_wrap.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{flagos_hal.get_include()}", str(WRAP_SOURCE),
                    "-o", str(lib), "-ldl"], check=True)
    return str(lib)


@pytest.mark.parametrize(("mode", "reason"), [
    ("abi10", "the HAL 'sim' (ABI 1.0) has no graph runtime"),
    ("format", "loads acme-npu-v9: no format in common"),
])
def test_offload_degrades_on_a_hal_that_cannot_take_graphs(wrap_hal, mode, reason):
    env = dict(os.environ, FLAGOS_HAL=wrap_hal, FLAGOS_WRAP_HAL=flagos_hal.library_path("sim"),
               FLAGOS_WRAP_MODE=mode)
    proc = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("offload_hal_run.py"))],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HAL-RUN-OK" in proc.stdout and reason in proc.stdout, proc.stdout
