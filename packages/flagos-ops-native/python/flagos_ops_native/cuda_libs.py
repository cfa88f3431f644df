"""Where NVIDIA's libraries are, for manifests that ``locate`` them (cublas.toml).

The copy torch already loaded is preferred (one cuBLAS in the process), then the
``nvidia-cublas`` wheel's, then the dynamic loader's search path."""

from __future__ import annotations

import ctypes.util
import glob
import os
import sys

__all__ = ["cublas"]


def _loaded(stem: str) -> str | None:
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(" ", 1)[-1].strip()
                if os.path.basename(path).startswith(stem + ".so"):
                    return path
    except OSError:
        pass
    return None


def _find(stem: str) -> str:
    import torch  # noqa: F401 - torch's CUDA build loads its cuBLAS with it

    if found := _loaded(stem):
        return found
    for root in sys.path:
        hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", f"{stem}.so*"), recursive=True))
        if hits:
            return hits[-1]
    name = ctypes.util.find_library(stem.removeprefix("lib"))
    if name:
        return name
    raise FileNotFoundError(f"{stem}.so not found (not loaded by torch, no nvidia wheel on "
                            "sys.path, not on the loader's search path)")


def cublas() -> str:
    """The path of libcublas."""
    return _find("libcublas")
