"""A library that cannot be bound never breaks flagos: a missing symbol, an ABI version
out of range, a bad manifest line or a missing library leave those ops unserved by native,
with the reason in explain() and `python -m flagos info`, and the chain falls through."""

from __future__ import annotations

import flagos
import pytest
import torch
from flagos.info import collect, format_info
from flagos_ops_native import NativeProvider, manifest_dir
from flagos_ops_native.conventions import CONVENTIONS
from flagos_ops_native.loader import bind_manifest
from route_stats import calls

LIB = (manifest_dir().parent / "lib" / "libsimk.so").resolve()


def _manifest(tmp_path, ops: str, versions: str = ">=1.0,<2.0", path: str = str(LIB)):
    p = tmp_path / "vendor.toml"
    p.write_text(f"""[library]
name = "vendorx"
path = "{path}"
version_symbol = "simkGetAbiVersion"
versions = "{versions}"
error_symbol = "simkGetLastError"
hals = ["sim"]
dtypes = ["float32"]

[ops]
{ops}""")
    return p


@pytest.fixture
def only(native_first):
    """Install a native provider that knows only the given manifest's libraries."""
    original = flagos.routing.providers()["native"]

    def install(path):
        status = bind_manifest(str(path))
        flagos.routing.register_provider(NativeProvider([status]))
        return status

    yield install
    flagos.routing.register_provider(original)


def _falls_through(op_name: str, fn, *args):
    flagos.routing.reset_stats()
    out = fn(*(a.to("flagos") for a in args))
    torch.testing.assert_close(out.cpu(), fn(*args))
    assert calls(op_name, "native") == 0 and calls(op_name, "cpu") >= 1, flagos.routing.stats()


def test_missing_symbol(tmp_path, only):
    p = _manifest(tmp_path, '"aten::exp" = { symbol = "simkExp", convention = "unary" }\n'
                  '"aten::sin" = { symbol = "simkSine", convention = "unary" }\n')
    status = only(p)
    reason = status.unserved["aten::sin.out"]
    assert reason == ("vendorx lacks symbol(s) simkSineGetWorkspaceSize, simkSine "
                      "(vendor.toml:12)")
    text = str(flagos.routing.explain("aten::sin.out"))
    assert f"- native: skipped, does not serve aten::sin.out: {reason}" in text, text
    assert "served by: cpu" in text
    _falls_through("aten::sin.out", torch.sin, torch.randn(8))
    # the other line of the same manifest is bound and served
    x = torch.randn(8)
    torch.testing.assert_close(torch.exp(x.to("flagos")).cpu(), torch.exp(x))
    assert calls("aten::exp.out", "native") == 1


def test_abi_version_out_of_range(tmp_path, only):
    p = _manifest(tmp_path, '"aten::exp" = { symbol = "simkExp", convention = "unary" }\n',
                  versions=">=2.0,<3.0")
    status = only(p)
    assert "reports ABI version 1.0 (simkGetAbiVersion); the manifest accepts >=2.0,<3.0" \
        in status.error
    text = str(flagos.routing.explain("aten::exp.out"))
    assert "native: skipped, does not serve aten::exp.out: library 'vendorx':" in text, text
    assert "reports ABI version 1.0" in text
    info = format_info(collect())
    assert "vendorx (" in info and "not loaded: library 'vendorx'" in info, info
    _falls_through("aten::exp.out", torch.exp, torch.randn(8))


def test_bad_manifest_line(tmp_path, only):
    p = _manifest(tmp_path, '"aten::exp" = { symbol = "simkExp", convention = "unray" }\n')
    status = only(p)
    assert status.error == (f"manifest error: {p}:11: unknown convention 'unray' for "
                            "'aten::exp'; did you mean 'unary'? Known conventions: "
                            + ", ".join(sorted(CONVENTIONS)))
    assert f"manifest error: {p}:11" in str(flagos.routing.explain("aten::exp.out"))
    assert f"manifest error: {p}:11" in format_info(collect())
    _falls_through("aten::exp.out", torch.exp, torch.randn(8))


def test_missing_library(tmp_path, only):
    p = _manifest(tmp_path, '"aten::exp" = { symbol = "simkExp", convention = "unary" }\n',
                  path=str(tmp_path / "libnothere.so"))
    status = only(p)
    assert "cannot open" in status.error and "libnothere.so" in status.error
    _falls_through("aten::exp.out", torch.exp, torch.randn(8))


def test_shipped_library_status():
    native = flagos.routing.providers()["native"]
    (line,) = native.status_lines()
    assert line.startswith("simk 1.0 on sim: ") and "op overloads" in line
    assert "unserved" not in line
    assert "simk 1.0 on sim" in format_info(collect())
