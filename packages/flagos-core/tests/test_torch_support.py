"""The torch-release checks: untested releases and an extension built for another one."""

from __future__ import annotations

import flagos._torch_support as ts
import pytest


def test_release_of() -> None:
    assert ts.release_of("2.13.0+cpu") == "2.13"
    assert ts.release_of("2.14.1") == "2.14"
    assert ts.release_of("2.15.0a0+git1234") == "2.15"


def test_a_tested_release_matching_the_build_has_no_warnings(monkeypatch) -> None:
    monkeypatch.setattr(ts, "built_with", lambda: "2.13.0+cpu")
    assert ts.support_warnings("2.13.1") == []


def test_an_untested_release_is_named(monkeypatch) -> None:
    monkeypatch.setattr(ts, "built_with", lambda: None)
    (w,) = ts.support_warnings("2.8.0")
    assert "2.8.0 is not a release flagos was tested with" in w
    assert ", ".join(ts.TESTED_RELEASES) in w


def test_a_build_for_another_release_is_named(monkeypatch) -> None:
    monkeypatch.setattr(ts, "built_with", lambda: "2.13.0+cpu")
    (w,) = ts.support_warnings("2.12.1")
    assert "compiled against torch 2.13.0+cpu but torch 2.12.1 is installed" in w
    assert "torch==2.13.*" in w


def test_a_failed_extension_import_names_the_mismatch(monkeypatch) -> None:
    monkeypatch.setattr(ts, "built_with", lambda: "2.13.0+cpu")
    msg = ts.explain_import_failure(ImportError("undefined symbol: _ZN3c10..."), "2.12.1")
    assert msg.startswith("flagos' C++ extension failed to load: undefined symbol")
    assert "compiled against torch 2.13.0+cpu" in msg


@pytest.mark.parametrize("release", ts.TESTED_RELEASES)
def test_tested_releases_have_compat_results(release: str) -> None:
    """Every release claimed as tested has a passing compat run on record (docs/compat/)."""
    import json
    import os
    import pathlib

    results = pathlib.Path(__file__).resolve().parents[3] / "docs" / "compat"
    if not results.is_dir():
        pytest.skip("not a source checkout")
    if os.environ.get("FLAGOS_COMPAT_RUN"):
        pytest.skip("inside a compat run, which is making these results")
    path = results / f"torch-{release}.json"
    assert path.is_file(), (
        f"no compat results for torch {release}: run nox -s \"compat(torch='{release}')\"")
    r = json.loads(path.read_text())
    assert r["build"] == "ok" and r["conformance"] == "passed", r
    assert not [f for t in r["tests"].values() for f in t["failed"]], r["tests"]


@pytest.mark.parametrize("form", ["functional", "out", "inplace"])
def test_ops_whose_composite_kernel_calls_a_stub_go_down_their_route(form) -> None:
    # ldexp's CompositeExplicitAutograd kernel calls a DispatchStub of the device in torch
    # 2.12 ("DispatchStub: missing kernel for flagos"); routed as itself it works in every
    # release, and is counted under its own name.
    import flagos
    import torch

    x = torch.randn(16)
    e = torch.randint(-4, 4, (16,), dtype=torch.int32)
    want = torch.ldexp(x, e)
    xf, ef = x.to("flagos"), e.to("flagos")
    flagos.routing.reset_stats()
    if form == "functional":
        got = torch.ldexp(xf, ef)
    elif form == "out":
        got = torch.empty_like(xf)
        torch.ldexp(xf, ef, out=got)
    else:
        got = xf.clone().ldexp_(ef)
    torch.testing.assert_close(got.cpu(), want)
    name = {"functional": "aten::ldexp.Tensor", "out": "aten::ldexp.out",
            "inplace": "aten::ldexp_"}[form]
    assert sum(p["calls"] for p in flagos.routing.stats().get(name, {}).values()) == 1, \
        flagos.routing.stats()
