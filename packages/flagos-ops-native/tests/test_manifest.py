"""Manifest validation: every mistake is a RoutingConfigError naming the file, the line
and the bad word, with the closest valid names; the shipped manifest is valid."""

from __future__ import annotations

import textwrap

import pytest
from flagos.routing import RoutingConfigError
from flagos_ops_native import manifest_dir
from flagos_ops_native.codegen import header_check
from flagos_ops_native.manifest import parse

HEAD = """\
[library]
name = "simk"
path = "libsimk.so"
version_symbol = "simkGetAbiVersion"
versions = ">=1.0,<2.0"
hals = ["sim"]
dtypes = ["float32", "bfloat16"]

[ops]
"""


def _write(tmp_path, body: str, head: str = HEAD):
    p = tmp_path / "m.toml"
    p.write_text(head + textwrap.dedent(body))
    return p


def test_shipped_manifest_binds_forms():
    m = parse(manifest_dir() / "simk.toml")
    add = next(e for e in m.ops if e.op == "aten::add.Tensor")
    assert add.overloads == ("aten::add.Tensor", "aten::add_.Tensor", "aten::add.out")
    assert add.symbols["float16"] == ("simkAddGetWorkspaceSize", "simkAdd")
    s = next(e for e in m.ops if e.op == "aten::sum.dim_IntList")
    assert "aten::sum.IntList_out" in s.overloads
    mm = next(e for e in m.ops if e.op == "aten::mm")
    assert mm.overloads == ("aten::mm", "aten::mm.out")  # no in-place mm


@pytest.mark.parametrize("body, line, word, text", [
    ('"aten::neg" = { symbol = "simkNeg", convention = "unray" }\n', 10, "unray",
     "unknown convention 'unray' for 'aten::neg'; did you mean 'unary'?"),
    ('"aten::negg" = { symbol = "simkNeg", convention = "unary" }\n', 10, "aten::negg",
     "unknown op 'aten::negg'; did you mean 'aten::neg'"),
    ('"aten::neg" = { symbol = "simkNeg", convention = "unary", dtypes = ["float33"] }\n', 10,
     "float33", "unknown dtype 'float33'; did you mean 'float32'"),
    ('"aten::neg" = { symbol = "simkNeg", convention = "binary" }\n', 10, "binary",
     "'aten::neg' takes (Tensor), which the 'binary' convention"),
    ('"aten::neg" = { symbol = "simkNeg", convension = "unary" }\n', 10, "convension",
     "unknown op entry key 'convension'; did you mean 'convention'?"),
    ('\n"aten::neg" = "simkNeg"\n', 11, "aten::neg", "must be an inline table"),
    ('"aten::neg" = { symbol = "simkNeg", convention = "unary", forms = ["outt"] }\n', 10,
     "outt", "unknown form 'outt'; did you mean 'out'?"),
])
def test_bad_op_line(tmp_path, body, line, word, text):
    p = _write(tmp_path, body)
    with pytest.raises(RoutingConfigError) as e:
        parse(p)
    assert e.value.file == str(p) and e.value.line == line and e.value.word == word, str(e.value)
    assert text in str(e.value)
    assert str(e.value).startswith(f"{p}:{line}: ")


def test_bad_library_table(tmp_path):
    p = _write(tmp_path, "", HEAD.replace('">=1.0,<2.0"', '"1.0+"'))
    with pytest.raises(RoutingConfigError, match=r"m.toml:5: 'versions' must read"):
        parse(p)
    p = _write(tmp_path, "", HEAD.replace("hals =", "halz ="))
    with pytest.raises(RoutingConfigError, match=r"m.toml:6: unknown \[library\] key 'halz'; "
                       r"did you mean 'hals'"):
        parse(p)
    p = _write(tmp_path, '"aten::neg" = { symbol = "simkNeg", convention = "unary", }\n')
    with pytest.raises(RoutingConfigError, match=r"m.toml:10: TOML syntax error"):
        parse(p)


def test_header_check_names_every_symbol():
    text = header_check(parse(manifest_dir() / "simk.toml"))
    assert '#include "simk.h"' in text
    assert ("static_assert(std::is_same<decltype(&::simkMatmulGetWorkspaceSize), "
            "flagos_native_matmul_fn>::value") in text
    assert "decltype(&::simkGetAbiVersion), flagos_native_version_fn>" in text
    assert "simk.toml:" in text and "varargs" not in text and "..." not in text


def test_cublas_manifest_is_valid():
    """The NVIDIA manifest parses against this torch (its library loads only on a GPU
    machine: tools/gpu_check.sh native)."""
    m = parse(manifest_dir() / "cublas.toml")
    assert m.library.hals == frozenset({"cuda"}) and m.library.version_style == "library_property"
    mm = next(e for e in m.ops if e.op == "aten::mm")
    assert mm.convention == "cublas_gemm" and "aten::mm.out" in mm.overloads
    assert mm.symbols["bfloat16"] == ("cublasGemmStridedBatchedEx", "")
