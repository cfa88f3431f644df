"""Which HAL libraries a process uses.

The rule (also in docs/hal/loader.md):

1. ``FLAGOS_HAL`` set (and not empty): a comma-separated list of HAL names and library
   paths, used in that order (duplicates dropped). A name is looked up in the
   ``flagos.hal`` entry-point group (the entry point is a zero-argument function that
   returns the library path); anything containing a path separator or ending in ``.so``
   is a path and must exist. An unknown name is a ValueError naming it and listing the
   available names. Nothing is probed: you get exactly what you asked for.
2. ``FLAGOS_HAL`` unset: every ``flagos.hal`` entry point except ``sim`` whose library
   exists, loads, and reports at least one device (a ctypes probe), in entry-point name
   order; if none qualifies, ``sim`` alone. HALs that fail to load are skipped with a
   warning.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points

GROUP = "flagos.hal"
ENV = "FLAGOS_HAL"


@dataclass(frozen=True)
class HalSpec:
    """A HAL to load: its name, the library path, and where the choice came from."""

    name: str
    path: str
    origin: str  # "FLAGOS_HAL", "entry point <dist>", or "default"


def _entry_points() -> dict:
    eps: dict = {}
    for ep in entry_points(group=GROUP):
        eps.setdefault(ep.name, ep)
    return eps


def available() -> list[str]:
    """Names registered in the ``flagos.hal`` entry-point group."""
    return sorted(_entry_points())


def _is_path(item: str) -> bool:
    return os.sep in item or "/" in item or item.endswith(".so")


def _name_from_path(path: str) -> str:
    stem = os.path.basename(path).split(".so")[0]
    for prefix in ("lib", "flagos_hal_"):
        stem = stem.removeprefix(prefix)
    return stem or path


def _from_entry_point(name: str, ep, origin: str) -> HalSpec:
    dist = getattr(getattr(ep, "dist", None), "name", None) or ep.value
    path = ep.load()()
    return HalSpec(name, os.fspath(path), f"{origin} (entry point of {dist})")


def resolve(item: str, origin: str = "argument") -> HalSpec:
    """One HAL name or path -> HalSpec. Unknown names: ValueError listing the names."""
    item = item.strip()
    if _is_path(item):
        if not os.path.isfile(item):
            raise ValueError(f"flagos: HAL library path {item!r} (from {origin}) does not exist")
        return HalSpec(_name_from_path(item), os.path.abspath(item), origin)
    eps = _entry_points()
    if item not in eps:
        raise ValueError(
            f"flagos: unknown HAL {item!r} (from {origin}); available HALs: "
            f"{', '.join(sorted(eps)) or 'none'} (entry-point group {GROUP!r}), "
            "or give a library path"
        )
    return _from_entry_point(item, eps[item], origin)


@functools.cache
def _device_count(path: str) -> int:
    from flagos_hal.binding import Hal

    return Hal(path).device_count()


def discover() -> list[HalSpec]:
    """The HALs this process should load, by the rule in this module's docstring."""
    env = os.environ.get(ENV, "").strip()
    if env:
        specs: list[HalSpec] = []
        for item in env.split(","):
            if item.strip():
                spec = resolve(item, ENV)
                if all(s.path != spec.path for s in specs):
                    specs.append(spec)
        return specs
    eps = _entry_points()
    found = []
    for name in sorted(eps):
        if name == "sim":
            continue
        try:
            spec = _from_entry_point(name, eps[name], "default")
        except FileNotFoundError:
            continue  # not built in this installation
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break discovery
            warnings.warn(f"flagos: skipping HAL {name!r}: {e}", RuntimeWarning, stacklevel=2)
            continue
        try:
            if _device_count(spec.path) > 0:
                found.append(spec)
        except Exception as e:  # noqa: BLE001 - same: warn and go on
            warnings.warn(f"flagos: skipping HAL {name!r} ({spec.path}): {e}", RuntimeWarning,
                          stacklevel=2)
    if found:
        return found
    if "sim" not in eps:
        raise ValueError(f"flagos: no HAL has devices and no 'sim' entry point in {GROUP!r}")
    return [_from_entry_point("sim", eps["sim"], "default")]
