"""Core's copy, stream and shadow tests and the training steps again, in children, with the
ops an installed FlagGems serves routed as themselves (tools/pytest_plugins/
flagos_as_themselves.py), as every process that loads FlagGems on a GPU machine runs:
copies to and from the host keep the runtime's copy path, ``x.cpu()`` returns a CPU
tensor, and the routes' statistics still say which providers served the step."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tools" / "pytest_plugins"
# On a GPU machine the processes that load FlagGems (the gems folder, the route sweep, the
# zoo's gems cases) run this way for real; this emulates it on sim.
pytestmark = pytest.mark.skipif(os.environ.get("FLAGOS_HAL", "sim") != "sim",
                                reason="emulates an installed FlagGems on sim; on a GPU "
                                       "machine FlagGems' own processes run this way")
CORE_TESTS = ["tests/test_streams.py", "tests/test_fallback_copy_ops.py",
              "tests/test_runtime_ops.py", "tests/test_memory.py",
              "tests/test_shadow.py::test_every_op_of_a_training_step"]


def _pytest(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(PLUGINS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "flagos_as_themselves", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def test_core_copies_and_streams() -> None:
    r = _pytest(ROOT / "packages" / "flagos-core", *CORE_TESTS)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@pytest.mark.parametrize("route", ["configured", "cpu"])
def test_training_steps(route: str) -> None:
    r = _pytest(ROOT / "integration_tests", "test_model.py", "-k",
                f"test_transformer_trains_like_cpu and {route}")
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]
