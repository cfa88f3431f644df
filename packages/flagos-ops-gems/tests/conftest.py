"""Shared set-up of the gems provider's tests.

On sim the Triton kernels run under Triton's interpreter on CPU twin aliases: it must be
switched on before Triton is imported. On a CUDA HAL they are compiled for the GPU.
"""

from __future__ import annotations

import os

if os.environ.get("FLAGOS_TEST_HW", "sim") == "sim":
    os.environ["TRITON_INTERPRET"] = "1"

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import flagos
import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def run_python(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Runs ``python -c code`` in a fresh process (extra PYTHONPATH entries first)."""

    def run(code: str, path: list[Path] = (), env: dict[str, str] | None = None,
            timeout: float = 240) -> subprocess.CompletedProcess:
        full = {**os.environ, **(env or {})}
        full.pop("FLAGOS_ROUTES_FILE", None)
        full.pop("FLAGOS_ROUTES", None)
        full["PYTHONPATH"] = os.pathsep.join(
            [*map(str, path), *filter(None, [os.environ.get("PYTHONPATH")])])
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                              env=full, timeout=timeout, cwd=tmp_path)

    return run


@pytest.fixture
def test_library() -> Iterator[object]:
    """The project's own Triton test kernels installed as provider ``tritontest`` (the way
    the entry point installs FlagGems as ``gems``), with the routes sending every op it
    serves to it, then boxing, then cpu."""
    pytest.importorskip("triton")
    from flagos_ops_gems import register_library
    from triton_test_kernels import TritonTestKernels

    library = TritonTestKernels()
    p = register_library("tritontest", library)
    flagos.routing.register_provider(p)
    flagos.routing.reset_stats()
    with flagos.routing.override({"default": ["tritontest", "boxing", "cpu"]}):
        yield library
