"""The warm command (flagos_ops_gems.warm): it runs a model's steps with the gems routes,
reports each step's time, the providers that served the calls and the caches' growth, and
says why where gems cannot run."""

from __future__ import annotations

import sys

import flagos
import pytest
import torch
from flagos_ops_gems import warm

SIM = torch.flagos.get_device_properties(0).hal == "sim"


@pytest.fixture
def caches(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("FLAGGEMS_CACHE_DIR", str(tmp_path / "flaggems"))
    return tmp_path


def test_the_caches_are_where_the_environment_says(caches, monkeypatch) -> None:
    assert warm.cache_dirs() == {"triton": caches / "triton", "flaggems": caches / "flaggems"}
    monkeypatch.delenv("TRITON_CACHE_DIR")
    assert warm.cache_dirs()["triton"].parts[-2:] == (".triton", "cache")


def test_calls_are_counted_by_provider_and_cpu_fallbacks_by_op() -> None:
    stats = {"aten::mm": {"gems": {"calls": 3}, "cpu": {"calls": 0}},
             "aten::mul.Tensor": {"gems": {"calls": 5}, "cpu": {"calls": 2}},
             "aten::slice_backward": {"cpu": {"calls": 1, "declined": 0}}}
    assert warm.calls_by_provider(stats) == ({"gems": 8, "cpu": 3},
                                             {"aten::mul.Tensor": 2, "aten::slice_backward": 1})


def _small_step():
    x = torch.randn(8, 16, device="flagos")
    return lambda: (x * 2 + 1).softmax(-1).sum()


def test_warm_times_each_step_and_names_what_served_it(caches) -> None:
    # On sim the Llama step's calls go past gems (no Triton target); on a GPU, with the
    # caches empty, FlagGems would compile and autotune all of them (minutes): a few
    # kernels say the same there
    step = warm._tinyllama_step("1x64", "2x16", "float32") if SIM else _small_step()
    rules = flagos.routing.rules()
    report = warm.warm(step, steps=2)
    assert len(report.step_seconds) == 2 and all(s > 0 for s in report.step_seconds)
    assert sum(report.calls.values()) > 0
    assert report.caches_before["triton"] == (0, 0)
    text = "\n".join(report.lines())
    assert "step 1:" in text and "step 2:" in text and "calls by provider:" in text
    assert str(caches / "flaggems") in text
    assert flagos.routing.rules() == rules  # the routes as they were


def test_a_script_runs_with_its_arguments(caches, tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys, torch\n"
                      "x = torch.ones(4, device='flagos') * float(sys.argv[1])\n"
                      "assert x.sum().item() == 4 * float(sys.argv[1])\n"
                      "open(sys.argv[2], 'w').write('ran')\n")
    done = tmp_path / "done"
    report = warm.warm(warm._script_step(str(script), ["2.5", str(done)]), steps=1)
    assert done.read_text() == "ran" and len(report.step_seconds) == 1
    assert sys.argv[0] != str(script)  # the caller's argv is back


@pytest.mark.skipif(not SIM, reason="gems cannot run on sim")
def test_where_gems_cannot_run_the_command_says_why(caches, capsys) -> None:
    assert warm.main(["--tinyllama", "1x64", "--batch", "2x16"]) == 2
    err = capsys.readouterr().err
    assert "gems is not available on flagos:0:" in err


def test_bad_sizes_are_named() -> None:
    with pytest.raises(SystemExit, match="--batch is AxB"):
        warm._tinyllama_step("1x64", "2by16", "float32")


@pytest.mark.skipif(not SIM, reason="on a GPU the command would warm for real")
def test_run_as_a_module_the_gems_entry_point_loads() -> None:
    # `python -m flagos_ops_gems.warm` imports this package before torch; torch then loads
    # flagos, whose provider discovery must find the package's entry point whole
    import os
    import subprocess

    r = subprocess.run([sys.executable, "-m", "flagos_ops_gems.warm", "--tinyllama", "1x64",
                        "--batch", "2x16"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "FLAGOS_HAL": "sim"}, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "entry point 'gems'" not in r.stderr and "partially initialized" not in r.stderr, \
        r.stderr
    assert "gems is not available on flagos:0:" in r.stderr
