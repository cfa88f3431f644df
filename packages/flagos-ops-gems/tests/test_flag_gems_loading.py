"""FlagGems loads lazily and, when it cannot be used, ``gems`` is skipped with the reason;
the routing file that selects gems; the shipped routes do not name it."""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path

import flagos
import flagos_ops_gems
import pytest

EXPLAIN = textwrap.dedent("""
    import sys, torch, flagos
    x = torch.ones(4, device="flagos") + 1           # routed ops, shipped routes
    print("imported before:", "flag_gems" in sys.modules)
    flagos.routing.load("gems")
    print(flagos.routing.explain("aten::add.Tensor"))
    print("imported after:", "flag_gems" in sys.modules)
    print("result:", (x * 2).cpu().tolist())
""")


def _fake_flag_gems(root: Path, body: str) -> Path:
    (root / "flag_gems").mkdir(parents=True)
    (root / "flag_gems" / "__init__.py").write_text(textwrap.dedent(body))
    return root


def test_import_is_lazy_and_a_missing_or_failing_flag_gems_is_a_reason(run_python) -> None:
    r = run_python(EXPLAIN)
    assert r.returncode == 0, r.stderr
    assert "imported before: False" in r.stdout
    if os.environ.get("FLAGOS_TEST_HW") == "cuda" and importlib.util.find_spec("flag_gems"):
        # a GPU machine with FlagGems: the first route that names gems loads it
        assert "imported after: True" in r.stdout
    else:
        # FlagGems is missing here, or present but unable to find a device (CPU machines)
        assert "gems: skipped, not installed: " in r.stdout
    assert "result: [4.0, 4.0, 4.0, 4.0]" in r.stdout


def test_flag_gems_that_raises_on_import(run_python, tmp_path: Path) -> None:
    root = _fake_flag_gems(tmp_path / "raising", 'raise RuntimeError("no device found")\n')
    r = run_python(EXPLAIN, path=[root])
    assert r.returncode == 0, r.stderr
    assert ("gems: skipped, not installed: import flag_gems failed: RuntimeError: "
            "no device found") in r.stdout
    assert "imported after: False" in r.stdout


def test_flag_gems_too_old(run_python, tmp_path: Path) -> None:
    root = _fake_flag_gems(tmp_path / "old", '__version__ = "4.2.0"\n')
    r = run_python(EXPLAIN, path=[root])
    assert r.returncode == 0, r.stderr
    assert "gems: skipped, not installed: FlagGems 4.2.0 found, flagos-ops-gems needs " \
           "flag-gems>=5.0.2,<5.1" in r.stdout


def test_info_prints_the_reason(run_python, tmp_path: Path) -> None:
    root = _fake_flag_gems(tmp_path / "old", '__version__ = "4.2.0"\n')
    r = run_python("import runpy, sys; sys.argv = ['flagos', 'info']; "
                   "runpy.run_module('flagos', run_name='__main__')", path=[root])
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("gems "))
    assert "C++" in line
    assert "not installed: FlagGems 4.2.0 found" in r.stdout


def test_routing_file_by_name_and_path() -> None:
    assert Path(flagos_ops_gems.ROUTES_FILE).is_file()
    try:
        flagos.routing.load("gems")
        rule = next(r for r in flagos.routing.rules() if r.key == "default" and r.hal is None)
        assert rule.chain == ("gems", "boxing", "cpu")
        assert rule.origin.startswith(flagos_ops_gems.ROUTES_FILE)
    finally:
        flagos.routing.reset()
    with pytest.raises(flagos.routing.RoutingConfigError, match="named routing files: .*gems"):
        flagos.routing.load("gemz")


def test_shipped_routes_do_not_name_gems() -> None:
    flagos.routing.reset()
    assert all("gems" not in r.chain for r in flagos.routing.rules()
               if r.origin.startswith(str(Path(flagos.routing.table.DEFAULTS_FILE))))
