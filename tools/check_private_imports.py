#!/usr/bin/env python3
"""Fails when code outside flagos-core uses a private part of flagos-core.

Packages reach flagos-core through its public API only (``flagos.provider_api``,
``flagos.routing``, ``torch.flagos``, entry points), so that core can change its insides
without breaking a vendor's provider. Private means a module or name whose own part starts
with one underscore (core's ``_C``, ``_routing_backend``,
``flagos.routing.config._Where``); dunder modules (``flagos.__main__``, the CLI) are public.
Checked, in every Python file outside ``packages/flagos-core``:

- ``import flagos._x`` and ``from flagos... import _x``;
- attribute chains on the name ``flagos`` (``flagos._C._graph_formats``);
- string constants that name such a part (code that a package generates, docstrings).

    python tools/check_private_imports.py [ROOT]
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = "packages/flagos-core"
SKIP_DIRS = {".git", ".nox", ".venv", "build", "dist", "__pycache__", ".whl", ".out"}
# flagos.<public parts>._private, not preceded by "torch." (torch.flagos._lazy_init and the
# like are the hooks torch itself calls on a device module).
TEXT = re.compile(r"(?<![\w.])flagos(?:\.[A-Za-z]\w*)*\._[A-Za-z]\w*")


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _module_private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "flagos" and any(_private(p) for p in parts[1:])


def _chain(node: ast.Attribute) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def problems(path: Path) -> Iterator[tuple[int, str]]:
    """(line, what) for each use of a private part of flagos in one file."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _module_private(alias.name):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "flagos":
                continue
            if _module_private(node.module):
                yield node.lineno, f"from {node.module} import ..."
            for alias in node.names:
                if _private(alias.name):
                    yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Attribute):
            chain = _chain(node)
            # the outermost attribute of a chain is reported once, by its own node
            if chain and chain[0] == "flagos" and _private(chain[-1]) and \
                    not any(_private(p) for p in chain[1:-1]):
                yield node.lineno, ".".join(chain)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in TEXT.finditer(node.value):
                yield node.lineno, f"text {m.group(0)!r}"


def files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_DIRS & set(rel.parts) or rel.as_posix().startswith(CORE + "/") or \
                path.resolve() == Path(__file__).resolve():  # its own examples
            continue
        yield path


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    root = Path(args[0]).resolve() if args else ROOT
    found = [(p, line, what) for p in files(root) for line, what in problems(p)]
    for p, line, what in found:
        print(f"{p.relative_to(root)}:{line}: private part of flagos-core used outside it: "
              f"{what} (use flagos.provider_api or another public API)")
    if found:
        print(f"{len(found)} use(s) of private flagos-core parts outside packages/flagos-core")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
