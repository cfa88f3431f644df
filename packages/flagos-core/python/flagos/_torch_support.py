"""Which torch releases this flagos supports, and whether the running one matches the build.

flagos-core's C++ extension links against the C++ symbols of the torch it was compiled
against, so it runs with that release only (any patch release of it); the source supports
every release in :data:`TESTED_RELEASES`, each built and tested with
``nox -s "compat(torch='2.X')"`` (results: docs/compat.md).
"""

from __future__ import annotations

import re

__all__ = ["TESTED_RELEASES", "built_with", "release_of", "support_warnings"]

TESTED_RELEASES: tuple[str, ...] = ("2.11", "2.12", "2.13", "2.14")
"""torch minor releases whose build and sim test suite pass (docs/compat.md)."""


def release_of(version: str) -> str:
    """``"2.13"`` for ``"2.13.0+cpu"`` (the minor release a version belongs to)."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return f"{m.group(1)}.{m.group(2)}" if m else version


def built_with() -> str | None:
    """The torch version flagos-core's extension was compiled against, read without
    loading the extension (a wheel records it at build time); None where unrecorded."""
    try:
        from flagos._build_info import TORCH_VERSION
    except ImportError:
        return None
    return TORCH_VERSION


def support_warnings(running: str) -> list[str]:
    """What is off about running flagos on torch ``running``: an untested release, or an
    extension compiled against another release. Empty when all is as tested."""
    out = []
    if release_of(running) not in TESTED_RELEASES:
        out.append(f"torch {running} is not a release flagos was tested with "
                   f"(tested: {', '.join(TESTED_RELEASES)}); expect failures")
    built = built_with()
    if built is not None and release_of(built) != release_of(running):
        out.append(f"flagos-core was compiled against torch {built} but torch {running} is "
                   f"installed: reinstall flagos-core for this torch (pip install "
                   f"--no-build-isolation flagos-core) or install torch=={release_of(built)}.*")
    return out


def explain_import_failure(error: ImportError, running: str) -> str:
    """The message for a failed import of the C++ extension, naming a torch mismatch
    (the usual cause: undefined C++ symbols of another release) when there is one."""
    hints = support_warnings(running)
    text = f"flagos' C++ extension failed to load: {error}"
    return f"{text}. {' '.join(hints)}" if hints else text
