"""Shared fixtures for the flagos-core tests (runtime, API, CLI).

Tests run in-process on the HALs this process loaded (sim by default: two devices).
A few need a process of their own (environment read at load time, fork, a capped
device, two HALs, autoload); they go through the ``run_python`` fixture, which starts
``python -c CODE`` with this checkout's flagos first on PYTHONPATH.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import flagos
import pytest
import torch

PYTHON_DIR = Path(flagos.__file__).resolve().parent.parent


def _sim_only() -> bool:
    return all(
        torch.flagos.get_device_properties(i).hal == "sim"
        for i in range(torch.flagos.device_count())
    )


@pytest.fixture(autouse=True)
def _connected_dispatcher(request: pytest.FixtureRequest) -> None:
    """The runtime tests (this folder, not routing/) need the routing table connected to the
    real C++ dispatcher; a test elsewhere may have left a fake backend or none."""
    if request.node.path.parent != Path(__file__).parent:
        return
    from flagos._routing_backend import CppBackend, install
    from flagos.routing import table

    if not isinstance(table._state.backend, CppBackend):
        install()


@pytest.fixture
def two_devices() -> None:
    """Skip unless two flagos devices are present (sim has two by default)."""
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")


@pytest.fixture
def sim_only() -> None:
    """Skip unless every loaded HAL is sim (timing and capacity tests assume it)."""
    if not _sim_only():
        pytest.skip("needs the sim HAL")


@pytest.fixture
def device0() -> object:
    """Run the test with flagos:0 current and restore the previous device afterwards."""
    prev = torch.flagos.current_device()
    torch.flagos.set_device(0)
    yield
    torch.flagos.set_device(prev)


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess]:
    """Run ``python -c code`` with extra environment; returns the finished process."""

    def run(code: str, env: dict[str, str] | None = None, timeout: float = 120,
            check: bool = True) -> subprocess.CompletedProcess:
        full = dict(os.environ)
        full.pop("FLAGOS_HAL", None)
        full["PYTHONPATH"] = os.pathsep.join(
            [str(PYTHON_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
        full.update(env or {})
        proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"subprocess failed ({proc.returncode})\nstdout:\n{proc.stdout}\n"
                f"stderr:\n{proc.stderr}")
        return proc

    return run


@pytest.fixture
def install_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                         ) -> Iterator[Callable[[str, str, str], str]]:
    """``install(dist_name, module_source, entry_points)``: a fake installed distribution
    (a module and a dist-info whose entry_points.txt is ``entry_points``, in which
    ``{module}`` names the module) on sys.path; returns the module's name. Removed after
    the test."""
    modules: list[str] = []

    def install(dist_name: str, source: str, entry_points: str) -> str:
        module = f"{dist_name.replace('-', '_')}_{tmp_path.name.replace('-', '_')}"
        (tmp_path / f"{module}.py").write_text(source)
        info = tmp_path / f"{dist_name.replace('-', '_')}-0.0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.0.0\n")
        (info / "entry_points.txt").write_text(
            textwrap.dedent(entry_points).replace("{module}", module))
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
        modules.append(module)
        return module

    yield install
    for module in modules:
        sys.modules.pop(module, None)


@pytest.fixture(scope="session")
def sim_copy(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second copy of the sim HAL library, so that one process can load two HALs."""
    import flagos_hal

    src = flagos_hal.resolve("sim").path
    dst = tmp_path_factory.mktemp("hal") / "libflagos_hal_simcopy.so"
    shutil.copy(src, dst)
    return str(dst)


@pytest.fixture(scope="session")
def sim_kernel_image(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], bytes]:
    """``image(name)``: the sim kernel library built from ``tests/sim_kernels/<name>.c``
    (skips where no C compiler is found)."""
    from flagos_hal import sim_kernels

    if sim_kernels.compiler() is None:
        pytest.skip("no C compiler to build the sim kernel library")
    built: dict[str, bytes] = {}

    def image(name: str) -> bytes:
        if name not in built:
            built[name] = sim_kernels.build(Path(__file__).parent / "sim_kernels" / f"{name}.c",
                                            tmp_path_factory.mktemp(name) / f"lib{name}.so")
        return built[name]

    return image
