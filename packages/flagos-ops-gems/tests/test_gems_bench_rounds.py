"""The host bench's clean process (gems_bench.FlagGemsCudaProcess) answers one round at a
time, so its rounds alternate with the measuring process's; here a stand-in child that
speaks the same line protocol, printing noise to stdout as libraries do."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "gems_bench.py"

CHILD = r"""
import json, sys
print("a library's banner on stdout", flush=True)
for line in sys.stdin:
    name = line.strip()
    if not name:
        break
    if name == "boom":
        sys.stderr.write("FlagGems failed on boom\n")
        sys.exit(3)
    print("noise before the reply", flush=True)
    print(json.dumps({"op": name, "seconds": len(name) * 1e-6}), flush=True)
"""


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gems_bench_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rounds_are_asked_one_at_a_time_and_noise_is_passed_over(bench, tmp_path) -> None:
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    clean = bench.FlagGemsCudaProcess([sys.executable, str(child)], dict(os.environ))
    try:
        assert [clean.time(n) for n in ("add", "softmax", "add")] == [3e-6, 7e-6, 3e-6]
    finally:
        clean.close()
    assert clean.child.returncode == 0


def test_a_failed_clean_process_is_reported_with_its_error(bench, tmp_path) -> None:
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    clean = bench.FlagGemsCudaProcess([sys.executable, str(child)], dict(os.environ))
    with pytest.raises(SystemExit, match="FlagGems failed on boom"):
        clean.time("boom")
    clean.child.wait(timeout=60)
