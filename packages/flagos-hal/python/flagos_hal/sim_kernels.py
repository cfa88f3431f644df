"""Kernel libraries for the simulated device (the format ``flagos-sim-kernels-v1``,
``flagos_hal/sim_runtime.h``) built from C sources with the machine's C compiler, against
this package's headers: how a test or an example makes an image the sim HAL's
``module_load`` takes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from flagos_hal._bundled import get_include

__all__ = ["FORMAT", "build", "compiler"]

FORMAT = "flagos-sim-kernels-v1"


def compiler() -> str | None:
    """The C compiler found on PATH (``cc``, else ``gcc``), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def build(source: str | Path, library: Path) -> bytes:
    """Compile ``source`` (a C file, or C text when a ``str``) into the shared library
    ``library`` and return its bytes, the image. RuntimeError without a C compiler, or with
    the compiler's output when compiling fails."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("flagos_hal.sim_kernels: no C compiler (cc or gcc) on PATH")
    library = Path(library)
    if isinstance(source, str):
        path = library.with_suffix(".c")
        path.write_text(source)
    else:
        path = Path(source)
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-fvisibility=hidden", f"-I{get_include()}",
                        str(path), "-o", str(library)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"flagos_hal.sim_kernels: compiling {path} failed:\n{r.stderr}")
    return library.read_bytes()
