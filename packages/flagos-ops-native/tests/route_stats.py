"""Counters of flagos.routing.stats() per whole op.

A functional op reaches the dispatcher as its out= form unless an installed provider has
it routed as itself (flagos-ops-gems does so for every op FlagGems serves), so a test that
asks which provider served an op counts every overload of it."""

from __future__ import annotations

import flagos


def _count(op: str, provider: str, key: str) -> int:
    whole = op.split(".")[0]
    return sum(row.get(provider, {}).get(key, 0)
               for name, row in flagos.routing.stats().items() if name.split(".")[0] == whole)


def calls(op: str, provider: str) -> int:
    """Calls of any overload of ``op`` (``"aten::sin.out"`` counts ``aten::sin`` too)."""
    return _count(op, provider, "calls")


def declined(op: str, provider: str) -> int:
    """Declines of any overload of ``op`` by ``provider``."""
    return _count(op, provider, "declined")
