"""The build-time generator: from a manifest, a C++ file of static_asserts that the vendor
header declares every bound symbol with exactly the type flagos calls it through.

    python -m flagos_ops_native.codegen MANIFEST -o CHECK.cpp

Compiling CHECK.cpp with the vendor's include path fails, naming the manifest line, when a
symbol is missing from the header or declared with another signature. The file is a build
product: it is written into the build folder and never checked in.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from .conventions import CONVENTIONS
from .manifest import Manifest, parse

__all__ = ["header_check", "main"]


def _assert(symbol: str, c_type: str, where: str, header: str) -> str:
    message = f"{where}: {symbol} is not declared in {header} as {c_type}"
    return (f"static_assert(std::is_same<decltype(&::{symbol}), {c_type}>::value,\n"
            f"              \"{message}\");")


def header_check(manifest: Manifest) -> str:
    """The C++ source checking ``manifest`` against its ``header``."""
    lib = manifest.library
    if not lib.header:
        raise ValueError(f"{manifest.file}: [library] names no 'header' to check against")
    name = Path(manifest.file).name
    lines = [f"// Generated from {name} by flagos_ops_native.codegen; a build product.",
             "#include <type_traits>", "", '#include "flagos_native/kernel_abi.h"',
             f'#include "{lib.header}"', ""]
    lines.append(_assert(lib.version_symbol, "flagos_native_version_fn", f"{name} [library]",
                         lib.header))
    if lib.error_symbol:
        lines.append(_assert(lib.error_symbol, "flagos_native_error_fn", f"{name} [library]",
                             lib.header))
    done: set[str] = set()
    for entry in manifest.ops:
        plan_type = CONVENTIONS[entry.convention].plan_type
        if not plan_type:
            raise ValueError(f"{name}:{entry.line}: the {entry.convention!r} convention is a "
                             "vendor API's own; it has no flagos_native type to check against")
        for plan, execute in entry.symbols.values():
            for symbol, c_type in ((plan, plan_type), (execute, "flagos_native_execute_fn")):
                if symbol and symbol not in done:
                    done.add(symbol)
                    lines.append(_assert(symbol, c_type, f"{name}:{entry.line} ({entry.op})",
                                         lib.header))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flagos_ops_native.codegen",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    text = header_check(parse(args.manifest))
    out = Path(args.output)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
