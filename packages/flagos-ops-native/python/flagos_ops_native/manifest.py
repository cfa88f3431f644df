"""Kernel-library manifests: parsing and validation (TOML, ``file:line`` errors).

A manifest describes one vendor library and binds its kernels to ATen ops, one line per
op (see docs/native.md)::

    [library]
    name = "simk"
    path = "lib/libsimk.so"                  # or soname = "...", or locate = "module:function"
    header = "simk.h"                        # the vendor header the build checks against
    version_symbol = "simkGetAbiVersion"     # returns (major << 16 | minor)
    versions = ">=1.0,<2.0"
    error_symbol = "simkGetLastError"        # optional
    hals = ["sim"]                           # the HALs whose streams the kernels run on
    dtypes = ["float32", "float16", "bfloat16"]

    [ops]
    "aten::mm" = { symbol = "simkMatmul", convention = "matmul" }
    "aten::add.Tensor" = { symbol = "simkAdd", convention = "binary", dtypes = ["float32"] }

Mistakes raise :class:`flagos.routing.RoutingConfigError` (the routing table's error type,
with its ``file``, ``line``, ``word`` and ``suggestions``). This module only reads the
file and checks it against the installed torch; :mod:`flagos_ops_native.loader` binds it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from flagos.provider_api import KeyLocator, Where, syntax_error, type_name
from flagos.routing import RoutingConfigError
from flagos.routing import ops as _ops

from .conventions import CONVENTIONS, DTYPES

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

__all__ = ["Library", "Manifest", "OpEntry", "parse"]

_LIBRARY_KEYS = ("dtypes", "error_symbol", "hals", "header", "locate", "name", "path",
                 "plan_suffix", "soname", "version_style", "version_symbol", "versions")
_VERSION_STYLES = ("library_property", "uint32")
_OP_KEYS = ("convention", "dtypes", "forms", "symbol")
_FORMS = ("functional", "inplace", "out")


@dataclass(frozen=True)
class Library:
    """The ``[library]`` table. ``path`` is resolved against the manifest's folder."""

    name: str
    path: str | None
    soname: str | None
    locate: str | None
    header: str | None
    version_symbol: str
    min_version: int   # (major << 16 | minor)
    max_version: int   # exclusive
    error_symbol: str
    hals: frozenset[str]
    plan_suffix: str
    version_style: str = "uint32"


@dataclass(frozen=True)
class OpEntry:
    """One ``[ops]`` line: ``op`` bound to ``symbol`` through ``convention``.

    ``overloads``: the op overloads this line serves (the functional one, and its in-place
    and out= forms where torch has them and ``forms`` allows). ``symbols``: per dtype name,
    the (plan, execute) symbol names (execute "" for a one-phase convention)."""

    op: str
    line: int
    convention: str
    overloads: tuple[str, ...]
    symbols: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class Manifest:
    file: str
    library: Library
    ops: tuple[OpEntry, ...]


def _schema_of(name: str):
    base, overload = _ops.split(name)
    return torch._C._get_schema(base, "" if overload == "default" else overload)


def _inputs(schema) -> list:
    return [a for a in schema.arguments
            if not (a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)]


def _input_types(schema) -> list[str]:
    return [str(a.type) for a in _inputs(schema)]


def _overloads_by_op() -> dict[str, list[str]]:
    """Every registered op name, grouped by whole op (``aten::add`` -> its overloads)."""
    index: dict[str, list[str]] = {}
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        index.setdefault(_ops.split(name)[0], []).append(name)
    return index


def _forms_of(op: str, wanted: tuple[str, ...], index: dict[str, list[str]]) -> tuple[str, ...]:
    """The overloads of ``op``'s functional form, its in-place twin ``name_`` and its out=
    overload (the one whose non-out arguments are the functional's), as torch has them."""
    base, overload = _ops.split(op)
    full = base if overload == "default" else op
    out: list[str] = [full] if "functional" in wanted else []
    schema = _schema_of(full)
    if "inplace" in wanted and not base.endswith("_"):
        inplace = f"{base}_" + ("" if overload == "default" else f".{overload}")
        if _ops.is_op(inplace) and _input_types(_schema_of(inplace)) == _input_types(schema):
            out.append(inplace)
    if "out" in wanted:
        want = [(a.name, str(a.type)) for a in _inputs(schema)]
        for name in index.get(base, []):
            if name == full:
                continue
            s = _schema_of(name)
            outs = [a for a in s.arguments if a not in _inputs(s)]
            if outs and [(a.name, str(a.type)) for a in _inputs(s)] == want:
                out.append(name)
                break
    return tuple(out)


def _versions(text: object, where: Where) -> tuple[int, int]:
    m = re.fullmatch(r"\s*>=\s*(\d+)\.(\d+)\s*,\s*<\s*(\d+)(?:\.(\d+))?\s*", str(text))
    if not isinstance(text, str) or not m:
        raise where.error(("library", "versions"), f"'versions' must read '>=MAJOR.MINOR,<MAJOR"
                          f"[.MINOR]', got {text!r}", str(text))
    lo = int(m[1]) << 16 | int(m[2])
    hi = int(m[3]) << 16 | int(m[4] or 0)
    if hi <= lo:
        raise where.error(("library", "versions"), f"empty version range {text!r}", text)
    return lo, hi


def _check_keys(table: dict, allowed: tuple[str, ...], path: tuple[str, ...], where: Where,
                what: str) -> None:
    for key in table:
        if key not in allowed:
            raise where.unknown((*path, key), f"{what} key", key, allowed)


def _str(table: dict, key: str, path: tuple[str, ...], where: Where, required: bool = True
         ) -> str | None:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        got = "nothing" if value is None else f"{type_name(value)} {value!r}"
        raise where.error((*path, key) if key in table else path,
                          f"{'/'.join(path)}: {key!r} must be a non-empty string, got {got}", key)
    return value


def _dtypes(value: object, path: tuple[str, ...], where: Where) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(d, str) for d in value):
        raise where.error(path, f"'dtypes' must be a list of dtype names, got {value!r}", "dtypes")
    for d in value:
        if d not in DTYPES:
            raise where.unknown(path, "dtype", d, DTYPES)
    return tuple(value)


def _library(doc: dict, file: Path, where: Where) -> tuple[Library, tuple[str, ...]]:
    lib = doc.get("library")
    if not isinstance(lib, dict):
        raise where.error((), "a manifest needs a [library] table", "library")
    _check_keys(lib, _LIBRARY_KEYS, ("library",), where, "[library]")
    p = ("library",)
    found = [k for k in ("path", "soname", "locate") if k in lib]
    if len(found) != 1:
        raise where.error(p, "[library] needs exactly one of 'path', 'soname' or 'locate', got "
                          f"{', '.join(found) or 'none'}", "library")
    path = _str(lib, "path", p, where, False)
    locate = _str(lib, "locate", p, where, False)
    if locate and ":" not in locate:
        raise where.error((*p, "locate"), f"'locate' must read 'module:function', got {locate!r}",
                          locate)
    hals = lib.get("hals")
    if not isinstance(hals, list) or not hals or not all(isinstance(h, str) for h in hals):
        raise where.error((*p, "hals") if "hals" in lib else p,
                          f"[library] 'hals' must be a list of HAL names, got {hals!r}", "hals")
    lo, hi = _versions(lib.get("versions"), where)
    style = lib.get("version_style", "uint32")
    if style not in _VERSION_STYLES:
        raise where.unknown((*p, "version_style"), "version style", str(style), _VERSION_STYLES)
    library = Library(
        name=_str(lib, "name", p, where),
        path=str((file.parent / path).resolve()) if path else None,
        soname=_str(lib, "soname", p, where, False), locate=locate,
        header=_str(lib, "header", p, where, False),
        version_symbol=_str(lib, "version_symbol", p, where),
        min_version=lo, max_version=hi,
        error_symbol=_str(lib, "error_symbol", p, where, False) or "",
        hals=frozenset(hals), plan_suffix=lib.get("plan_suffix", "GetWorkspaceSize"),
        version_style=style)
    dtypes = _dtypes(lib["dtypes"], (*p, "dtypes"), where) if "dtypes" in lib else ("float32",)
    return library, dtypes


def _op_entry(op: object, value: object, library: Library, default_dtypes: tuple[str, ...],
              where: Where, index: dict[str, list[str]]) -> OpEntry:
    path = ("ops", str(op))
    if not isinstance(op, str) or not _ops.is_op(op):
        matches = _ops.suggest(str(op), whole_ops=False)
        hint = f"; did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""
        raise where.error(path, f"unknown op {op!r}{hint} (an op overload: 'aten::add.Tensor', "
                          "or 'aten::mm' for a default overload)", str(op), matches)
    if not isinstance(value, dict):
        raise where.error(path, f"{op!r} must be an inline table {{ symbol = ..., convention = "
                          f"... }}, got {type_name(value)} {value!r}", op)
    _check_keys(value, _OP_KEYS, path, where, "op entry")
    symbol = _str(value, "symbol", path, where)
    conv_name = _str(value, "convention", path, where)
    if conv_name not in CONVENTIONS:
        raise where.unknown(path, "convention", conv_name, CONVENTIONS, f" for {op!r}")
    conv = CONVENTIONS[conv_name]
    base, overload = _ops.split(op)
    functional = base if overload == "default" else op
    types = _input_types(_schema_of(functional))
    if not conv.accepts(types):
        raise where.error(path, f"{op!r} takes ({', '.join(types)}), which the {conv_name!r} "
                          f"convention ({conv.what}) cannot call; it takes {conv.shapes()}",
                          conv_name)
    dtypes = _dtypes(value["dtypes"], path, where) if "dtypes" in value else default_dtypes
    forms = value.get("forms", list(_FORMS))
    if not isinstance(forms, list) or not forms or any(f not in _FORMS for f in forms):
        bad = next((f for f in forms if f not in _FORMS), forms) if isinstance(forms, list) else forms
        raise where.unknown(path, "form", str(bad), _FORMS)
    if "{dtype}" not in symbol and len(set(dtypes)) != len(dtypes):
        raise where.error(path, f"dtype listed twice for {op!r}", op)
    symbols = {}
    for d in dtypes:
        name = symbol.replace("{dtype}", DTYPES[d][1])
        symbols[d] = (name + library.plan_suffix, name) if conv.phases == 2 else (name, "")
    return OpEntry(op=functional, line=where.line(path), convention=conv_name,
                   overloads=_forms_of(op, tuple(forms), index), symbols=symbols)


def parse(path: str | Path) -> Manifest:
    """Read and validate a manifest against the installed torch; raises
    :class:`~flagos.routing.RoutingConfigError` at the first mistake."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as e:
        raise RoutingConfigError(str(file), 0, f"cannot read the manifest: {e}") from e
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise syntax_error(str(file), text, e) from e
    where = Where(str(file), KeyLocator(text))
    _check_keys(doc, ("library", "ops"), (), where, "top-level")
    library, dtypes = _library(doc, file, where)
    table = doc.get("ops", {})
    if not isinstance(table, dict):
        raise where.error(("ops",), "[ops] must be a table of op = { ... } lines", "ops")
    index = _overloads_by_op()
    entries = [_op_entry(op, value, library, dtypes, where, index)
               for op, value in table.items()]
    seen: dict[str, str] = {}
    for e in entries:
        for o in e.overloads:
            if o in seen:
                raise where.error(("ops", e.op), f"{o!r} is bound twice (by {seen[o]!r} and "
                                  f"{e.op!r})", e.op)
            seen[o] = e.op
    return Manifest(str(file), library, tuple(entries))
