"""Paths of what this wheel bundles: the C headers and the reference HAL libraries.

`sim` and `cuda` are the targets of the `flagos.hal` entry points: zero-argument
functions returning the path of a HAL shared library.
"""

from __future__ import annotations

import pathlib

_HERE = pathlib.Path(__file__).resolve().parent
_BUNDLED = {"sim": "libflagos_hal_sim.so", "cuda": "libflagos_hal_cuda.so"}
ASAN_SIM = "libflagos_hal_sim_asan.so"


def get_include() -> str:
    """The directory holding ``flagos_hal/flagos_hal.h`` and ``flagos_hal/loader.hpp``."""
    return str(_HERE / "include")


def lib_dir() -> pathlib.Path:
    return _HERE / "lib"


def library_path(name: str) -> str:
    """Path of a HAL library bundled in this wheel: ``"sim"`` or ``"cuda"``.

    Raises ValueError for another name and FileNotFoundError when the library was not
    built into this installation.
    """
    if name not in _BUNDLED:
        raise ValueError(
            f"flagos_hal.library_path: no bundled HAL named {name!r}; "
            f"bundled HALs are {', '.join(sorted(_BUNDLED))}"
        )
    path = lib_dir() / _BUNDLED[name]
    if not path.is_file():
        raise FileNotFoundError(
            f"flagos_hal: the {name!r} HAL is not built in this installation (missing {path})"
        )
    return str(path)


def sim() -> str:
    """Entry point ``flagos.hal: sim``: the simulated device."""
    return library_path("sim")


def cuda() -> str:
    """Entry point ``flagos.hal: cuda``: the CUDA HAL (opens libcuda at run time)."""
    return library_path("cuda")
