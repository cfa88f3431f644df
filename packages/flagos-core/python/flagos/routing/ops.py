"""ATen operator names as the routing table sees them.

An *op name* is what the dispatcher registers: ``aten::add.Tensor`` for a named overload,
``aten::addmm`` for the default overload. A routing *key* is one of:

- ``default``: the chain for every op without a more specific entry;
- a whole op, ``aten::add``: every overload of ``add``;
- an overload, ``aten::add.Tensor``; the default overload is spelled ``aten::addmm.default``.
"""

from __future__ import annotations

import difflib
import threading
from typing import Literal

import torch

KeyKind = Literal["default", "op", "overload"]

WELL_KNOWN_OPS: frozenset[str] = frozenset({
    "flagos_quant::fp8_weight_linear", "flagos_quant::nvfp4_weight_linear"})
"""Ops of the project's own packages that the shipped routes name: valid keys before (or
without) the package that defines them being imported."""

_lock = threading.Lock()
_names: frozenset[str] = frozenset()
_bases: frozenset[str] = frozenset()


def _refresh() -> None:
    global _names, _bases
    names = frozenset(torch._C._dispatch_get_all_op_names())
    with _lock:
        _names = names
        _bases = frozenset(split(n)[0] for n in names)


def overload(name: str) -> torch._ops.OpOverload:
    """The OpOverload of an op name (``aten::add.Tensor``; ``aten::addmm`` for the default
    overload); ValueError naming it when no such op is registered."""
    ns, _, rest = name.partition("::")
    base, _, over = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), base), over or "default")
    except AttributeError:
        raise ValueError(f"unknown op {name!r}") from None


def split(name: str) -> tuple[str, str]:
    """Split an op name or key into (whole-op name, overload): ``aten::mm`` -> ("aten::mm",
    "default"), ``aten::add.Tensor`` -> ("aten::add", "Tensor")."""
    ns, sep, rest = name.partition("::")
    base, dot, overload = rest.partition(".")
    return ns + sep + base, (overload if dot else "default")


def key_kind(key: str) -> KeyKind:
    """Classify a routing key (see the module docstring)."""
    if key == "default":
        return "default"
    return "overload" if "." in key.partition("::")[2] else "op"


def overload_key(op: str) -> str:
    """The overload key for an op name: ``aten::mm`` -> ``aten::mm.default``."""
    base, overload = split(op)
    return f"{base}.{overload}"


def _known(check: str, pool: str) -> bool:
    for attempt in range(2):
        if check in (_names if pool == "names" else _bases):
            return True
        if attempt == 0:
            _refresh()  # ops registered since the last look (custom ops, late imports)
    return False


def is_op(name: str) -> bool:
    """Whether ``name`` is a registered op (``aten::mm``, ``aten::add.Tensor`` or
    ``aten::mm.default``)."""
    base, overload = split(name)
    return _known(base if overload == "default" else name, "names")


def is_key(key: str) -> bool:
    """Whether ``key`` is a valid routing key: ``default``, a whole op with at least one
    registered overload, or a registered overload."""
    kind = key_kind(key)
    if kind == "default":
        return True
    if "::" not in key:
        return False
    if key in WELL_KNOWN_OPS:
        return True
    return _known(key, "bases") if kind == "op" else is_op(key)


def overloads(op: str) -> list[str]:
    """The registered op names of whole op ``op`` (``aten::softmax`` ->
    ``aten::softmax.int``, ``aten::softmax.int_out``), sorted; [] when it has none."""
    if not _known(op, "bases"):
        return []
    return sorted(name for name in _names if split(name)[0] == op)


def suggest(word: str, *, whole_ops: bool = True, n: int = 3) -> list[str]:
    """The closest registered op names (and whole-op names) to ``word``."""
    if not _names:
        _refresh()
    if not whole_ops and word in _bases and word not in _names:
        # 'aten::add' asked for as an op: it has no default overload, offer its overloads
        return sorted(name for name in _names if split(name)[0] == word)[:n]
    pool = _names | _bases if whole_ops else _names
    return difflib.get_close_matches(word, pool, n=n, cutoff=0.6)
