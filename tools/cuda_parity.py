#!/usr/bin/env python3
"""Compares ``torch.flagos`` with ``torch.cuda`` name by name and writes the table of
docs/python_api.md.

    python tools/cuda_parity.py                            # print the table
    python tools/cuda_parity.py --check docs/python_api.md # fail when the page differs
    python tools/cuda_parity.py --write docs/python_api.md # rewrite the page's table

**Which names.** The public names of ``torch.cuda`` are every name of
``torch.cuda.__all__``, and every other name in ``dir(torch.cuda)`` that does not start
with ``_``, is not a module, and is torch's own: a class or function defined in a public
torch module (``torch``, ``torch.cuda``, ...; not ``torch._utils``), or an UPPER_CASE
constant other than ``TYPE_CHECKING``. Left out so: the modules torch.cuda imports for
itself (``os``, ``threading``), its submodules outside ``__all__`` (present only once
something imports them), and the typing and functools helpers it imports.

**How each is classified** against ``getattr(torch.flagos, name)``:

- ``same``: present, of the same kind (function, class, module, constant), and
  - a function or class: every call that torch.cuda's signature accepts, flagos' accepts
    too: the same parameter names and kinds in the same order, extra flagos parameters
    only optional ones (where both signatures can be inspected);
  - a module: it has every name of torch.cuda's module's ``__all__``;
  - a constant: a value of the same type;
- ``differs``: present, but of another kind, signature, set of names or type;
- ``missing``: not present.

**Why.** Every ``differs`` and ``missing`` name needs its reason in
tools/cuda_parity.toml (the classifier refuses to write a table with an unexplained
gap); a reason given for a ``same`` name is shown as a note. The table is generated,
never edited by hand; it is for the torch release installed, which it names: ``--check``
on another release checks only that every gap has its reason.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import torch

ROOT = Path(__file__).resolve().parent.parent
REASONS = Path(__file__).with_suffix(".toml")
BEGIN = "<!-- cuda-parity: begin (tools/cuda_parity.py writes this) -->"
END = "<!-- cuda-parity: end -->"
RELEASE = re.compile(r"^On torch (\d+\.\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # of the torch.cuda object: function, class, module, constant
    status: str  # same, differs, missing
    detail: str  # what differs, generated ("" when nothing)
    reason: str  # from tools/cuda_parity.toml ("" when none)


def release() -> str:
    """The installed torch's release, "2.13"."""
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def flagos_module() -> types.ModuleType:
    """``torch.flagos``, loading flagos where torch did not autoload it."""
    import flagos  # noqa: F401  (registers torch.flagos)

    return torch.flagos


def kind(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "constant"


def _public_torch_module(module: str | None) -> bool:
    parts = (module or "").split(".")
    return parts[0] == "torch" and not any(p.startswith("_") for p in parts)


def public_names(module: types.ModuleType | None = None) -> list[str]:
    """The public names of torch.cuda, by the rule of this file's docstring."""
    module = torch.cuda if module is None else module
    declared = set(getattr(module, "__all__", ()))
    names = set(declared)
    for name in dir(module):
        if name in declared or name.startswith("_"):
            continue
        obj = getattr(module, name)
        k = kind(obj)
        if k in ("class", "function"):
            if _public_torch_module(getattr(obj, "__module__", None)):
                names.add(name)
        elif k == "constant" and name.isupper() and name != "TYPE_CHECKING":
            names.add(name)
    return sorted(names, key=lambda n: (n.lower(), n))


def _params(obj: object) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return None


def _show(params: list[inspect.Parameter]) -> str:
    star = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return "(" + ", ".join(star.get(p.kind, "") + p.name for p in params) + ")"


def _accepts(cuda: list[inspect.Parameter], flagos: list[inspect.Parameter]) -> bool:
    """Every call that ``cuda``'s parameters accept, ``flagos``' accept too."""
    if len(flagos) < len(cuda):
        return False
    for c, f in zip(cuda, flagos):
        if (c.name, c.kind) != (f.name, f.kind):
            return False
    return all(f.default is not inspect.Parameter.empty
               or f.kind in (f.VAR_POSITIONAL, f.VAR_KEYWORD) for f in flagos[len(cuda):])


def compare(cuda: object, flagos: object) -> tuple[str, str]:
    """(status, detail) of a name present in both."""
    if cuda is flagos:
        return "same", ""
    kc, kf = kind(cuda), kind(flagos)
    if kc != kf:
        return "differs", f"a {kf} in torch.flagos"
    if kc in ("function", "class"):
        pc, pf = _params(cuda), _params(flagos)
        if pc is None or pf is None or _accepts(pc, pf):
            return "same", ""
        return "differs", f"parameters `{_show(pf)}`, torch.cuda's `{_show(pc)}`"
    if kc == "module":
        lacking = [n for n in getattr(cuda, "__all__", public_names(cuda))
                   if not hasattr(flagos, n)]
        if not lacking:
            return "same", ""
        return "differs", "lacks " + ", ".join(f"`{n}`" for n in lacking)
    if type(cuda) is type(flagos):
        return "same", ""
    return "differs", f"a `{type(flagos).__name__}`, torch.cuda's a `{type(cuda).__name__}`"


def load_reasons(path: Path = REASONS) -> dict[str, str]:
    return {k: " ".join(v.split()) for k, v in tomllib.loads(path.read_text())["names"].items()}


class UnexplainedGap(Exception):
    """A name that differs or is missing has no reason in tools/cuda_parity.toml."""


def entries(reasons: dict[str, str] | None = None) -> list[Entry]:
    """Every public name of torch.cuda, classified against torch.flagos."""
    reasons = load_reasons() if reasons is None else reasons
    fl = flagos_module()
    out, unexplained = [], []
    for name in public_names():
        cuda = getattr(torch.cuda, name)
        if hasattr(fl, name):
            status, detail = compare(cuda, getattr(fl, name))
        else:
            status, detail = "missing", ""
        reason = reasons.get(name, "")
        if status != "same" and not reason:
            unexplained.append(f"{name} ({status}{': ' + detail if detail else ''})")
        out.append(Entry(name, kind(cuda), status, detail, reason))
    if unexplained:
        raise UnexplainedGap(f"no reason in {REASONS.relative_to(ROOT)} for: "
                             + "; ".join(unexplained))
    return out


def unknown_reasons(reasons: dict[str, str] | None = None) -> list[str]:
    """Names with a line in tools/cuda_parity.toml that the installed torch.cuda does not
    have (a typo, or a name of another torch release)."""
    reasons = load_reasons() if reasons is None else reasons
    return sorted(set(reasons) - set(public_names()))


def extras() -> list[str]:
    """Names of torch.flagos' __all__ that torch.cuda does not have."""
    fl = flagos_module()
    return sorted(n for n in fl.__all__ if not hasattr(torch.cuda, n))


def table(rows: list[Entry]) -> str:
    counts = {s: sum(e.status == s for e in rows) for s in ("same", "differs", "missing")}
    summary = (f"On torch {release()}, `torch.cuda` has {len(rows)} public names. In "
               f"`torch.flagos`, {counts['same']} are the same, {counts['differs']} "
               f"{'differs' if counts['differs'] == 1 else 'differ'} and {counts['missing']} "
               f"{'is' if counts['missing'] == 1 else 'are'} missing.")
    lines = [summary, "",
             "| `torch.cuda` | kind | `torch.flagos` | why, or a note |", "|---|---|---|---|"]
    for e in rows:
        why = "; ".join(x for x in (e.detail, e.reason) if x)
        lines.append(f"| `{e.name}` | {e.kind} | {e.status} | {why.replace('|', '/')} |")
    lines += ["", "`torch.flagos` also has " + ", ".join(f"`{n}`" for n in extras())
              + " (described above)."]
    return "\n".join(lines)


def block(rows: list[Entry] | None = None) -> str:
    return "\n".join([BEGIN, table(entries() if rows is None else rows), END])


def current_block(page: Path) -> str:
    text = page.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--check", metavar="PAGE", type=Path,
                       help="fail (exit 1, with a diff) when PAGE's table is not what this writes")
    group.add_argument("--write", metavar="PAGE", type=Path, help="rewrite PAGE's table")
    args = ap.parse_args(argv)
    try:
        new = block()
    except UnexplainedGap as e:
        print(e, file=sys.stderr)
        return 1
    if args.write:
        text = args.write.read_text()
        old = current_block(args.write)
        args.write.write_text(text.replace(old, new))
        print(f"wrote {args.write}" if old != new else f"{args.write} is up to date")
    elif args.check:
        old = current_block(args.check)
        recorded = RELEASE.search(old)
        if recorded and recorded.group(1) != release():
            print(f"{args.check}: table made on torch {recorded.group(1)}, this is torch "
                  f"{release()}: checked only that every gap has its reason")
            return 0
        unknown = unknown_reasons()
        if unknown:
            print(f"{REASONS.relative_to(ROOT)} explains names torch {release()}'s torch.cuda "
                  f"does not have: {', '.join(unknown)}")
            return 1
        if old != new:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                f"{args.check} (now)", f"{args.check} (generated)"))
            print(f"\n{args.check} is out of date: python tools/cuda_parity.py --write "
                  f"{args.check}")
            return 1
    else:
        print(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
