"""Routing files: parsing, includes, and every validation error naming file/line/word."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from flagos import routing
from flagos.routing.config import Vocabulary, load_file, parse_spec

VOCAB = Vocabulary(frozenset({"native", "gems", "boxing", "cpu"}), frozenset({"sim", "cuda"}))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def rules(layers):
    return {(r.hal, r.key): (r.chain, r.origin) for layer in layers for r in layer}


def test_parse_all_sections(tmp_path: Path) -> None:
    f = write(tmp_path / "routes.toml", """
        # comment
        default = ["native", "gems", "boxing", "cpu"]

        [ops]
        "aten::mm" = "boxing"
        'aten::add.Tensor' = ["gems", "cpu"]

        [hal.cuda]
        default = ["gems", "cpu"]

        [hal.cuda.ops]
        "aten::mm.default" = [
            "native",
            "cpu",
        ]
        """)
    got = rules(load_file(f, VOCAB))
    assert got == {
        (None, "default"): (("native", "gems", "boxing", "cpu"), f"{f}:2"),
        (None, "aten::mm"): (("boxing",), f"{f}:5"),
        (None, "aten::add.Tensor"): (("gems", "cpu"), f"{f}:6"),
        ("cuda", "default"): (("gems", "cpu"), f"{f}:9"),
        ("cuda", "aten::mm.default"): (("native", "cpu"), f"{f}:12"),
    }


def test_dotted_and_inline_keys_have_lines(tmp_path: Path) -> None:
    f = write(tmp_path / "r.toml", """
        hal.sim.default = ["boxing"]
        ops = { "aten::mm" = "gems" }
        """)
    got = rules(load_file(f, VOCAB))
    assert got[("sim", "default")] == (("boxing",), f"{f}:1")
    assert got[(None, "aten::mm")] == (("gems",), f"{f}:2")


def test_includes_are_relative_and_later_wins(tmp_path: Path, backend) -> None:
    write(tmp_path / "base" / "a.toml", """
        default = ["gems", "cpu"]
        [ops]
        "aten::mm" = "gems"
        "aten::mv" = "gems"
        """)
    write(tmp_path / "base" / "b.toml", """
        [ops]
        "aten::mv" = "native"
        """)
    top = write(tmp_path / "top.toml", """
        include = ["base/a.toml", "base/b.toml"]
        [ops]
        "aten::mm" = "boxing"
        """)
    layers = load_file(top, VOCAB)
    assert [len(layer) for layer in layers] == [3, 1, 1]
    routing.load(top)
    assert routing.explain("aten::mm").devices[0].decision.rule.chain == ("boxing",)
    assert routing.explain("aten::mv").devices[0].decision.rule.chain == ("native",)
    assert routing.explain("aten::bmm").devices[0].decision.rule.origin == (
        f"{tmp_path / 'base' / 'a.toml'}:1")


def check(err: routing.RoutingConfigError, file, line: int, word: str, suggestion=None):
    assert (err.file, err.line, err.word) == (str(file), line, word), str(err)
    assert str(err).startswith(f"{file}:{line}: ")
    assert word in str(err)
    if suggestion:
        assert suggestion in err.suggestions
        assert f"did you mean {suggestion!r}" in str(err)


@pytest.mark.parametrize(
    ("text", "line", "word", "suggestion", "fragment"),
    [
        ('default = ["cpu"]\n[ops]\n"aten::mm" = "gemz"\n', 3, "gemz", "gems",
         ("unknown provider 'gemz' for 'aten::mm'; did you mean 'gems'? "
          "Known providers: boxing, cpu, gems, native")),
        ('[ops]\n"aten::mmm" = "gems"\n', 2, "aten::mmm", "aten::mm", "unknown op"),
        ('[ops]\n"aten::add.Tensr" = "gems"\n', 2, "aten::add.Tensr", "aten::add.Tensor",
         "unknown op"),
        ('[ops]\n"mm" = "gems"\n', 2, "mm", None, "namespace::name"),
        ('defualt = ["cpu"]\n', 1, "defualt", "default", "unknown key 'defualt'"),
        ('[hal.cuda]\ndefault = ["cpu"]\nop = {}\n', 3, "op", "ops", "in [hal.cuda]"),
        ('[hal.cdua]\ndefault = ["cpu"]\n', 1, "cdua", "cuda", "unknown HAL 'cdua'"),
        ('[ops]\n"aten::mm" = 3\n', 2, "3", None, "got integer 3"),
        ('default = "gems, ,cpu"\n', 1, "", None, "empty provider name"),
        ('default = [1, 2]\n', 1, "[1, 2]", None, "got array"),
        ("ops = 5\n", 1, "ops", None, "'ops' must be a table"),
        ('[ops]\n"aten::mm" = ["cpu", "gems"]\n', 2, "gems", None, "must be last"),
        ('[ops]\n"aten::mm" = ["gems", "gems"]\n', 2, "gems", None, "appears twice"),
        ('default = [\n  "gems",\n  "boxng",\n]\n', 3, "boxng", "boxing", "unknown provider"),
        ('[ops]\n"aten::mm" = boxing\n', 2, "boxing", None, "TOML syntax error"),
        ('default = ["cpu"\n[ops]\n', 2, "[ops", None, "TOML syntax error"),
        ("include = 3\n", 1, "include", None, "list of file paths"),
    ],
)
def test_errors_name_file_line_word(tmp_path, text, line, word, suggestion, fragment) -> None:
    f = tmp_path / "routes.toml"
    f.write_text(text)
    with pytest.raises(routing.RoutingConfigError) as info:
        load_file(f, VOCAB)
    assert isinstance(info.value, ValueError)
    check(info.value, f, line, word, suggestion)
    assert fragment in str(info.value)


def test_include_errors(tmp_path: Path) -> None:
    top = write(tmp_path / "top.toml", 'default = ["cpu"]\ninclude = ["missing.toml"]\n')
    with pytest.raises(routing.RoutingConfigError) as info:
        load_file(top, VOCAB)
    check(info.value, top, 2, "missing.toml")
    a = write(tmp_path / "a.toml", 'include = ["b.toml"]\n')
    b = write(tmp_path / "b.toml", '# b\ninclude = ["a.toml"]\n')
    with pytest.raises(routing.RoutingConfigError, match="include cycle") as info:
        load_file(a, VOCAB)
    check(info.value, b, 2, "a.toml")
    bad = write(tmp_path / "sub" / "bad.toml", '[ops]\n\n"aten::mm" = "gemz"\n')
    top = write(tmp_path / "top2.toml", 'include = ["sub/bad.toml"]\n')
    with pytest.raises(routing.RoutingConfigError) as info:
        load_file(top, VOCAB)
    check(info.value, bad, 3, "gemz", "gems")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(routing.RoutingConfigError, match="cannot read") as info:
        load_file(tmp_path / "nope.toml", VOCAB)
    assert info.value.file == str(tmp_path / "nope.toml")


def test_op_key_forms() -> None:
    layer = parse_spec({"aten::add": "gems", "aten::mm.default": "cpu", "aten::add.Tensor":
                        "boxing", "hal.sim.default": "boxing,cpu"}, "set()", VOCAB)
    assert [(r.hal, r.key, r.chain) for r in layer] == [
        (None, "aten::add", ("gems",)), (None, "aten::mm.default", ("cpu",)),
        (None, "aten::add.Tensor", ("boxing",)), ("sim", "default", ("boxing", "cpu"))]
    for bad in ("aten::add.default", "aten::add.Bogus", "aten::nonexistent_op_xyz"):
        with pytest.raises(routing.RoutingConfigError, match="unknown op"):
            parse_spec({bad: "gems"}, "set()", VOCAB)


@pytest.mark.parametrize(
    ("spec", "source", "line", "word", "suggestion"),
    [
        ("aten::mm=cpu;;aten::softmax=boxing,gemz", "FLAGOS_ROUTES", 3, "gemz", "gems"),
        ("aten::mm=cpu;aten::mv", "FLAGOS_ROUTES", 2, "aten::mv", None),
        ("hal.cuba.aten::mm=cpu", "FLAGOS_ROUTES", 1, "cuba", "cuda"),
        ("aten::mm=", "FLAGOS_ROUTES", 1, "", None),
        ({"aten::mm": ["gems"], "aten::mv": 7}, "set()", 2, "7", None),
    ],
)
def test_spec_errors_name_source_and_entry(spec, source, line, word, suggestion) -> None:
    with pytest.raises(routing.RoutingConfigError) as info:
        parse_spec(spec, source, VOCAB)
    check(info.value, source, line, word, suggestion)


def test_spec_must_be_str_or_mapping() -> None:
    with pytest.raises(TypeError):
        parse_spec(["aten::mm=cpu"], "set()", VOCAB)  # type: ignore[arg-type]


def test_shipped_defaults_parse() -> None:
    vocab = Vocabulary(routing.WELL_KNOWN_PROVIDERS, VOCAB.hals)
    got = rules(load_file(routing.table.DEFAULTS_FILE, vocab))
    assert got[(None, "default")][0] == ("native", "boxing", "cpu")
    assert got[(None, "aten::_scaled_mm")][0][0] == "emulation"
    assert got[("sim", "default")][0] == ("boxing", "native", "cpu")
