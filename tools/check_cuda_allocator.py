"""Checks flagos' CUDA results allocator against the installed torch's CUDAAllocator interface.

The wrapper (packages/flagos-core/csrc_cuda/cuda_results_allocator.cpp) must forward every
virtual member of torch's allocator interface: a pure virtual it misses fails to compile,
but a defaulted one it misses compiles and silently takes the base class's default for all
CUDA work in the process. This script preprocesses the wrapper against the installed torch
(with that release's macros and #if branches resolved), lists the virtual members of
``c10::Allocator``, ``c10::DeviceAllocator`` and ``CUDAAllocator`` as that release
declares them, and reports each one the wrapper does not override.

    python tools/check_cuda_allocator.py [--json PATH] [--torch-include DIR]

``--torch-include`` checks the headers of another release (the ``torch/include`` folder
of its wheel, unpacked) instead of the installed torch's.

Exit status 0 when the wrapper covers the interface, 1 when it misses members, 2 when
the check could not run (no CUDA runtime headers, a preprocessing error).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
WRAPPER = ROOT / "packages/flagos-core/csrc_cuda/cuda_results_allocator.cpp"
BASES = ("Allocator", "DeviceAllocator", "CUDAAllocator")
WRAPPER_CLASS = "CudaResultsAllocator"
_CUDA_INCLUDE_HINTS = ("CUDA_HOME", "CUDA_PATH")


def _cuda_include() -> str | None:
    for var in _CUDA_INCLUDE_HINTS:
        if os.environ.get(var):
            cand = pathlib.Path(os.environ[var]) / "include"
            if (cand / "cuda_runtime_api.h").is_file():
                return str(cand)
    cand = pathlib.Path("/usr/local/cuda/include")
    return str(cand) if (cand / "cuda_runtime_api.h").is_file() else None


def _torch_include() -> pathlib.Path:
    import torch

    return pathlib.Path(torch.__file__).parent / "include"


def _header_version(include: pathlib.Path) -> str:
    text = (include / "torch/headeronly/version.h").read_text() if (
        include / "torch/headeronly/version.h").is_file() else (
        include / "torch/csrc/api/include/torch/version.h").read_text()
    parts = [re.search(rf"#define TORCH_VERSION_{k} (\d+)", text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def _preprocess(include: pathlib.Path, cuda_include: str, shim_dir: str) -> str:
    # CPU builds of torch ship the CUDA headers but not the one CMake generates for a CUDA
    # build; its macros (export attributes) do not change the interface.
    macros = include / "c10/cuda/impl/cuda_cmake_macros.h"
    if not macros.is_file():
        shim = pathlib.Path(shim_dir) / "c10/cuda/impl/cuda_cmake_macros.h"
        shim.parent.mkdir(parents=True)
        shim.write_text("#pragma once\n")
    cmd = [os.environ.get("CXX", "g++"), "-E", "-P", "-std=c++17",
           "-DFLAGOS_CUDA_ALLOCATOR_INTERFACE_CHECK",
           "-D_GLIBCXX_USE_CXX11_ABI=1",  # every release checked here uses the new ABI
           f"-I{ROOT / 'packages/flagos-core/csrc'}",
           f"-I{ROOT / 'packages/flagos-hal/include'}",
           f"-I{include}", f"-I{include / 'torch/csrc/api/include'}",
           f"-I{cuda_include}", f"-I{shim_dir}", str(WRAPPER)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _class_body(text: str, name: str) -> str:
    """The text between the braces of the definition of class ``name``."""
    attrs = r"(?:__attribute__\s*\(\(.*?\)\)\s*|\w+\s+)*"  # export macros, expanded
    m = re.search(rf"\b(?:class|struct)\s+{attrs}{name}\s*(?:final\s*)?(?::[^;{{]*)?\{{",
                  text)
    if m is None:
        raise LookupError(f"class {name} not found")
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i - 1]


def _strip_nested_bodies(body: str) -> str:
    """``body`` with the bodies of its inline member functions removed (so calls inside
    them are not mistaken for declarations)."""
    out, depth = [], 0
    for ch in body:
        if ch == "{":
            depth += 1
            if depth == 1:
                out.append(";")
            continue
        if ch == "}":
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    return "".join(out)


def _declared_names(body: str, marker: str) -> set[str]:
    """Names of the member functions in ``body`` whose declaration contains ``marker``
    (``virtual`` before the name, or ``override`` after the parameters)."""
    names = set()
    for decl in re.split(r"[;]", _strip_nested_bodies(body)):
        if not re.search(rf"\b{marker}\b", decl):
            continue
        m = re.search(r"(~?\w+)\s*\(", decl)
        if m and not m.group(1).startswith("~"):
            names.add(m.group(1))
    return names


def check(include: pathlib.Path | None = None) -> dict:
    """The check's result for the torch headers under ``include`` (default: the installed
    torch's): the release, the interface's virtual members per base, and those the wrapper
    misses."""
    include = include or _torch_include()
    result: dict = {"torch": _header_version(include)}
    cuda_include = _cuda_include()
    if cuda_include is None:
        result["error"] = "no CUDA runtime headers (set CUDA_HOME)"
        return result
    try:
        with tempfile.TemporaryDirectory() as shim_dir:
            text = _preprocess(include, cuda_include, shim_dir)
    except subprocess.CalledProcessError as e:
        result["error"] = f"preprocessing failed: {e.stderr.strip()[-2000:]}"
        return result
    interface = {base: sorted(_declared_names(_class_body(text, base), "virtual"))
                 for base in BASES}
    overridden = _declared_names(_class_body(text, WRAPPER_CLASS), "override")
    wanted = set().union(*interface.values())
    result["interface"] = interface
    result["missing"] = sorted(wanted - overridden)
    result["not_in_interface"] = sorted(overridden - wanted)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=pathlib.Path, help="also write the result here")
    parser.add_argument("--torch-include", type=pathlib.Path,
                        help="a release's torch/include folder (default: the installed torch's)")
    args = parser.parse_args()
    result = check(args.torch_include)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if "error" in result:
        print(f"check_cuda_allocator: torch {result['torch']}: {result['error']}")
        return 2
    n = sum(len(v) for v in result["interface"].values())
    if result["missing"] or result["not_in_interface"]:
        print(f"check_cuda_allocator: torch {result['torch']}: the wrapper misses "
              f"{', '.join(result['missing']) or 'nothing'}; overrides not in the interface: "
              f"{', '.join(result['not_in_interface']) or 'none'}")
        return 1
    print(f"check_cuda_allocator: torch {result['torch']}: all {n} virtual members forwarded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
