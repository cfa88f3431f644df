"""Parsing and validating routing configuration: TOML files and one-line specs.

A file::

    include = ["base.toml"]                 # optional, relative to this file; later wins
    default = ["native", "gems", "boxing", "cpu"]

    [ops]
    "aten::mm" = "boxing"                   # whole op: every overload
    "aten::add.Tensor" = ["gems", "cpu"]    # one overload

    [hal.cuda]                              # only for devices of the HAL named "cuda"
    default = ["gems", "boxing", "cpu"]

    [hal.cuda.ops]
    "aten::mm" = "boxing"

A one-line spec (``FLAGOS_ROUTES``, ``set("...")``, ``override("...")``)::

    aten::mm=cpu;aten::softmax=boxing,cpu;default=gems,cpu;hal.cuda.aten::mm=boxing

Every mistake raises :class:`RoutingConfigError` naming the file, the line and the bad word,
with the closest valid names. This module only parses; :mod:`flagos.routing.table` decides
what the rules mean.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import ops

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package (a flagos-core dependency there)
    import tomli as tomllib

__all__ = ["KeyLocator", "Layer", "RoutingConfigError", "Rule", "Vocabulary", "Where",
           "load_file", "parse_spec", "syntax_error", "type_name"]

_TOP_KEYS = ("default", "hal", "include", "ops")
_HAL_KEYS = ("default", "ops")


class RoutingConfigError(ValueError):
    """A routing configuration mistake.

    ``str()`` is ``"<file>:<line>: <message>"``; the parts are also attributes. ``file`` is
    the path of a TOML file, or ``FLAGOS_ROUTES`` / ``set()`` / ``override()`` for one-line
    specs (where ``line`` is the 1-based entry position). ``line`` is 0 when unknown.
    """

    def __init__(
        self,
        file: str,
        line: int,
        message: str,
        word: str | None = None,
        suggestions: Sequence[str] = (),
    ) -> None:
        self.file, self.line, self.message = str(file), line, message
        self.word, self.suggestions = word, tuple(suggestions)
        super().__init__(f"{self.file}:{line}: {message}" if line else f"{self.file}: {message}")


@dataclass(frozen=True)
class Rule:
    """One routing entry: on ``hal`` (None: every HAL), ``key`` routes to ``chain``.

    ``key`` is ``"default"``, a whole op (``aten::mm``) or an overload
    (``aten::add.Tensor``, ``aten::mm.default``). ``origin`` says where it was written, e.g.
    ``routes.toml:7`` or ``FLAGOS_ROUTES:2``.
    """

    hal: str | None
    key: str
    chain: tuple[str, ...]
    origin: str

    def describe(self) -> str:
        """``[hal.cuda] aten::mm`` style label of the entry."""
        return f"[hal.{self.hal}] {self.key}" if self.hal else self.key


Layer = tuple[Rule, ...]
"""The rules of one source (one file, one set()/override() call, the environment)."""


@dataclass(frozen=True)
class Vocabulary:
    """The names a configuration may use: known providers and known HALs."""

    providers: frozenset[str]
    hals: frozenset[str]


def _did_you_mean(word: str, pool: Sequence[str] | frozenset[str]) -> list[str]:
    return difflib.get_close_matches(word, sorted(pool), n=3, cutoff=0.6)


def _hint(matches: Sequence[str]) -> str:
    return f"; did you mean {', '.join(repr(m) for m in matches)}?" if matches else "."


class Where:
    """Turns a position (a key path, maybe a word in its value) into a line number."""

    def __init__(self, file: str, locate: KeyLocator | None = None, line: int = 0) -> None:
        self.file, self._locate, self._line = file, locate, line

    def line(self, path: tuple[str, ...], word: str | None = None) -> int:
        return self._locate.line_of(path, word) if self._locate else self._line

    def error(
        self,
        path: tuple[str, ...],
        message: str,
        word: str | None = None,
        suggestions: Sequence[str] = (),
    ) -> RoutingConfigError:
        return RoutingConfigError(self.file, self.line(path, word), message, word, suggestions)

    def unknown(self, path: tuple[str, ...], what: str, word: str, pool, tail: str = ""):
        matches = _did_you_mean(word, pool)
        message = f"unknown {what} {word!r}{tail}{_hint(matches)}"
        return self.error(path, f"{message} Known {what}s: {', '.join(sorted(pool))}", word,
                          matches)


def type_name(value: object) -> str:
    """A TOML value's type as an error message names it ("string", "array", ...)."""
    return {str: "string", int: "integer", float: "float", bool: "boolean", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def _chain(
    value: object, path: tuple[str, ...], owner: str, vocab: Vocabulary, where: Where
) -> tuple[str, ...]:
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise where.error(
            path, f"{owner!r} must be a provider name or a list of provider names, "
            f"got {type_name(value)} {value!r}", str(value))
    if not names or any(not n for n in names):
        raise where.error(path, f"empty provider name in the chain for {owner!r}", "")
    for name in names:
        if name not in vocab.providers:
            raise where.unknown(path, "provider", name, vocab.providers, f" for {owner!r}")
    for i, name in enumerate(names):
        if name in names[:i]:
            raise where.error(path, f"provider {name!r} appears twice in the chain for "
                              f"{owner!r}", name)
    if "cpu" in names[:-1]:
        after = names[names.index("cpu") + 1]
        raise where.error(path, f"provider {after!r} comes after 'cpu' in the chain for "
                          f"{owner!r}; 'cpu' never declines, so it must be last", after)
    return tuple(names)


def _check_op_key(key: str, path: tuple[str, ...], where: Where) -> None:
    if not isinstance(key, str) or not ops.is_key(key) or key == "default":
        matches = ops.suggest(key)
        form = "" if "::" in str(key) else " Ops are written 'namespace::name[.overload]'."
        raise where.error(path, f"unknown op {key!r}{_hint(matches)}{form}", key, matches)


def _rules_from_table(
    doc: Mapping[str, object],
    hal: str | None,
    prefix: tuple[str, ...],
    vocab: Vocabulary,
    where: Where,
) -> list[Rule]:
    allowed = _HAL_KEYS if hal else _TOP_KEYS
    rules: list[Rule] = []
    for key, value in doc.items():
        path = (*prefix, key)
        if key not in allowed:
            section = f" in [hal.{hal}]" if hal else ""
            matches = _did_you_mean(key, allowed)
            raise where.error(path, f"unknown key {key!r}{section}{_hint(matches)} "
                              f"Known keys: {', '.join(allowed)}", key, matches)
        if key == "default":
            chain = _chain(value, path, f"[hal.{hal}] default" if hal else "default", vocab,
                           where)
            rules.append(Rule(hal, "default", chain, f"{where.file}:{where.line(path)}"))
        elif key == "ops":
            if not isinstance(value, dict):
                raise where.error(path, f"'ops' must be a table, got {type_name(value)}", key)
            for op, chain_value in value.items():
                op_path = (*path, op)
                _check_op_key(op, op_path, where)
                chain = _chain(chain_value, op_path, op, vocab, where)
                rules.append(Rule(hal, op, chain, f"{where.file}:{where.line(op_path)}"))
        elif key == "hal":
            if not isinstance(value, dict):
                raise where.error(path, f"'hal' must be a table, got {type_name(value)}", key)
            for name, section in value.items():
                hal_path = (*path, name)
                if name not in vocab.hals:
                    raise where.unknown(hal_path, "HAL", name, vocab.hals)
                if not isinstance(section, dict):
                    raise where.error(hal_path, f"'hal.{name}' must be a table, got "
                                      f"{type_name(section)}", name)
                rules += _rules_from_table(section, name, hal_path, vocab, where)
    return rules


ROUTES_ENTRY_POINT_GROUP = "flagos.routes"


def named_routes_file(path: str | Path) -> Path:
    """The routing file ``path`` names: a file path, or a bare name (no directory, no
    suffix, no such file) that a package registered in the ``flagos.routes`` entry-point
    group (``gems`` -> flagos-ops-gems' routing file). Raises :class:`RoutingConfigError`
    for a bare name nobody registered, listing the names that are."""
    p = Path(path)
    if p.exists() or p.suffix or len(p.parts) != 1:
        return p
    eps = {ep.name: ep for ep in metadata.entry_points(group=ROUTES_ENTRY_POINT_GROUP)}
    if str(path) in eps:
        return Path(str(eps[str(path)].load()))
    known = ", ".join(sorted(eps)) or "none installed"
    raise RoutingConfigError(str(path), 0, f"no routing file {str(path)!r} and no routing "
                             f"file of that name (named routing files: {known})", str(path))


def load_file(
    path: str | Path, vocab: Vocabulary, _stack: tuple[Path, ...] = ()
) -> list[Layer]:
    """Parse and validate a routing file and its includes.

    Returns the layers in application order: each included file's layers (in the order
    listed), then the file's own rules. Raises :class:`RoutingConfigError`.
    """
    path = named_routes_file(path)
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RoutingConfigError(file, 0, f"cannot read routing file: {e.strerror or e}",
                                 file) from e
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise syntax_error(file, text, e) from e
    where = Where(file, KeyLocator(text))
    layers: list[Layer] = []
    includes = doc.get("include", [])
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise where.error(("include",), "'include' must be a list of file paths, got "
                          f"{type_name(includes)}", "include")
    here = path.resolve()
    for inc in includes:
        target = (path.parent / inc)
        if target.resolve() in (*_stack, here):
            raise where.error(("include",), f"include cycle: {inc!r} includes itself", inc)
        if not target.is_file():
            raise where.error(("include",), f"included file {inc!r} not found (looked for "
                              f"{target})", inc)
        layers += load_file(target, vocab, (*_stack, here))
    layers.append(tuple(_rules_from_table(doc, None, (), vocab, where)))
    return layers


def syntax_error(file: str, text: str, e: tomllib.TOMLDecodeError) -> RoutingConfigError:
    """A TOML syntax error of ``file`` (its source ``text``) as an error naming file and line."""
    message = str(e)
    found = re.search(r"at line (\d+), column (\d+)", message)
    lines = text.splitlines()
    if not found:  # e.g. "Cannot overwrite a value (at end of document)"
        return RoutingConfigError(file, len(lines), f"TOML syntax error: {message}")
    line, col = int(found[1]), int(found[2])
    rest = lines[line - 1][col - 1:] if line <= len(lines) else ""
    token = re.match(r"[^\s,\]\}=]+|\S", rest)
    word = token[0] if token else "<end of line>"
    return RoutingConfigError(file, line, f"TOML syntax error at {word!r}: {message}", word)


def split_scoped_key(key: str) -> tuple[str | None, str]:
    """``hal.cuda.aten::mm`` -> ("cuda", "aten::mm"); ``aten::mm`` -> (None, "aten::mm")."""
    if key.startswith("hal.") and "." in key[4:]:
        hal, _, rest = key[4:].partition(".")
        return hal, rest
    return None, key


def parse_spec(
    spec: str | Mapping[str, str | Sequence[str]],
    source: str,
    vocab: Vocabulary,
    note: str = "",
) -> Layer:
    """Parse a one-line spec (``"aten::mm=cpu;aten::softmax=boxing,cpu"``) or a mapping
    (``{"aten::mm": "cpu", "default": ["gems", "cpu"]}``).

    Keys: ``default``, an op key, or either prefixed by ``hal.<name>.`` to apply to one HAL.
    Errors name ``source`` as the file and the 1-based entry position as the line; ``note``
    is added to each rule's origin (e.g. the caller's location).
    """
    if isinstance(spec, str):
        entries: list[tuple[int, str, object]] = []
        for i, entry in enumerate(spec.split(";"), 1):
            if not entry.strip():
                continue
            key, eq, value = entry.partition("=")
            if not eq:
                raise RoutingConfigError(source, i, "expected 'op=provider[,provider...]', got "
                                         f"{entry.strip()!r}", entry.strip())
            entries.append((i, key.strip(), value))
    elif isinstance(spec, Mapping):
        entries = [(i, k, v) for i, (k, v) in enumerate(spec.items(), 1)]
    else:
        raise TypeError(f"a routing spec is a str or a mapping, not {type(spec).__name__}")
    rules = []
    for i, key, value in entries:
        where = Where(source, line=i)
        if not isinstance(key, str):
            raise where.error((), f"keys must be strings, got {key!r}", str(key))
        hal, op = split_scoped_key(key)
        if hal is not None and hal not in vocab.hals:
            raise where.unknown((), "HAL", hal, vocab.hals)
        if op != "default":
            _check_op_key(op, (), where)
        chain = _chain(value, (), key, vocab, where)
        origin = f"{source}:{i}" + (f" ({note})" if note else "")
        rules.append(Rule(hal, op, chain, origin))
    return tuple(rules)


# --- where is a key in the TOML text? (tomllib keeps no positions) ------------------------

_KEY_PART = re.compile(r"\s*([A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\"|'[^']*')\s*")


def _key_path(s: str, pos: int) -> tuple[tuple[str, ...], int]:
    parts: list[str] = []
    while True:
        m = _KEY_PART.match(s, pos)
        if not m:
            return tuple(parts), pos
        tok = m[1]
        parts.append(tomllib.loads(f"k = {tok}")["k"] if tok[0] in "\"'" else tok)
        pos = m.end()
        if pos < len(s) and s[pos] == ".":
            pos += 1
        else:
            return tuple(parts), pos


class KeyLocator:
    """Finds the line of each key path in TOML source text, and of a word in its value."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.spans: dict[tuple[str, ...], tuple[int, int]] = {}
        table: tuple[str, ...] = ()
        i = 0
        while i < len(self.lines):
            s = self.lines[i].strip()
            if s.startswith("["):
                start = 2 if s.startswith("[[") else 1
                table, _ = _key_path(s, start)
                self.spans.setdefault(table, (i + 1, i + 1))
                i += 1
                continue
            if not s or s.startswith("#"):
                i += 1
                continue
            path, pos = _key_path(s, 0)
            if not path or pos >= len(s) or s[pos] != "=":
                i += 1
                continue
            end = self._value_end(i, self.lines[i].index(s) + pos + 1)
            full = (*table, *path)
            for k in range(1, len(path)):  # dotted keys also define their parents
                self.spans.setdefault((*table, *path[:k]), (i + 1, i + 1))
            self.spans.setdefault(full, (i + 1, end + 1))
            i = end + 1

    def _value_end(self, i: int, pos: int) -> int:
        """The index of the last line of the value starting at (line i, column pos)."""
        depth, quote = 0, ""
        while i < len(self.lines):
            line = self.lines[i]
            while pos < len(line):
                if quote:
                    if line.startswith(quote, pos):
                        pos += len(quote)
                        quote = ""
                        continue
                    pos += 2 if line[pos] == "\\" and quote[0] == '"' else 1
                    continue
                c = line[pos]
                if c == "#":
                    break
                for q in ('"""', "'''", '"', "'"):
                    if line.startswith(q, pos):
                        quote = q
                        pos += len(q)
                        break
                else:
                    depth += c in "[{"
                    depth -= c in "]}"
                    pos += 1
            if len(quote) == 1:  # a one-line string cannot continue (tomllib checked)
                quote = ""
            if not quote and depth <= 0:
                return i
            i, pos = i + 1, 0
        return len(self.lines) - 1

    def line_of(self, path: tuple[str, ...], word: str | None = None) -> int:
        for n in range(len(path), 0, -1):  # the key, else its nearest written parent
            if path[:n] in self.spans:
                first, last = self.spans[path[:n]]
                if word:
                    for ln in range(first, last + 1):
                        text = self.lines[ln - 1]
                        if f'"{word}"' in text or f"'{word}'" in text:
                            return ln
                return first
        return 1
