"""Integration tests: cross-package checks on the flagos device (sim HAL by default).

Puts this folder on sys.path so the tests can import ``opinfo_sweep`` (pytest runs with
``--import-mode=importlib``, which does not add test folders to the path)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(autouse=True)
def _restore_routes():
    """Every test starts and ends on the configured routes."""
    import flagos

    yield
    flagos.routing.reset()
