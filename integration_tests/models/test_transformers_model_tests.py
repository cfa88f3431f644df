"""The runner of transformers' own model tests (transformers_model_tests.py) on a checkout
made here: one test module in transformers' layout, whose tests pass on both devices, only
on the CPU, only on an accelerator, or fail on flagos for a reason outside flagos."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("transformers")
pytest.importorskip("transformers.testing_utils")

import transformers_model_tests as runner

MODULE = '''
import unittest

import torch
from transformers.testing_utils import require_torch_accelerator, torch_device


class FakeModelTest(unittest.TestCase):
    def test_runs_on_the_device(self):
        x = torch.arange(4.0, device=torch_device)
        assert (x + x).sum().item() == 12

    def test_that_flagos_gets_wrong(self):
        assert torch_device == "cpu"

    @require_torch_accelerator
    def test_accelerator_only(self):
        assert torch.ones(2, device=torch_device).device.type == "flagos"

    def test_eager_matches_sdpa_inference_00_fp16(self):
        if torch_device != "cpu":
            raise ValueError("mean relative difference: 2e-05, torch atol = 1e-07, torch rtol = 0.0001")
'''


def _checkout(root, module: str):
    models = root / "tests" / "models" / "fake"
    models.mkdir(parents=True)
    for folder in (root / "tests", root / "tests" / "models", models):
        (folder / "__init__.py").write_text("")
    (models / "test_modeling_fake.py").write_text(textwrap.dedent(module))
    return root


def test_the_comparison_finds_regressions_and_names_causes_outside_flagos(tmp_path):
    out = tmp_path / "result.json"
    code = runner.main(["--checkout", str(_checkout(tmp_path, MODULE)), "--models", "fake",
                        "--jobs", "1", "--json", str(out)])
    result = json.loads(out.read_text())["models"]["fake"]
    assert code == 1  # the regression fails the run
    assert result["cpu"] == {"pass": 3, "skip": 1}, result
    assert [r["test"].split(".")[-1] for r in result["regressions"]] == [
        "FakeModelTest::test_that_flagos_gets_wrong"], result
    assert [r["test"].split(".")[-1] for r in result["outside_flagos"]] == [
        "FakeModelTest::test_eager_matches_sdpa_inference_00_fp16"], result
    assert result["flagos"] == {"pass": 2, "fail": 2}, result


def test_a_checkout_whose_tests_do_not_import_fails_the_run(tmp_path, capsys):
    module = "import a_test_dependency_that_is_not_installed\n" + MODULE
    code = runner.main(["--checkout", str(_checkout(tmp_path, module)), "--models", "fake",
                        "--jobs", "1"])
    assert code == 1
    assert "no test passed on the CPU" in capsys.readouterr().out


def test_a_tests_worst_outcome_is_kept(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="m.C" name="t"><skipped message="s"/></testcase>'
        '<testcase classname="m.C" name="t"><failure message="f">E   boom</failure></testcase>'
        '<testcase classname="m.C" name="u"><failure message="only the message"/></testcase>'
        '</testsuite></testsuites>')
    assert runner.outcomes(junit) == {"m.C::t": ("fail", "boom"),
                                      "m.C::u": ("fail", "only the message")}
