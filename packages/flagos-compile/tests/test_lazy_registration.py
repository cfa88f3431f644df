"""The flagos.plugins entry point registers at the first compilation, not at import torch,
and a torch._inductor import chain before any compilation does not trip it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import flagos_compile

PKG_PYTHON = Path(flagos_compile.__file__).resolve().parent.parent


def test_registers_after_dynamo_is_imported_not_before() -> None:
    code = "\n".join([
        "import sys",
        f"sys.path.insert(0, {str(PKG_PYTHON)!r})",
        "import torch, flagos",
        "import torch._inductor.utils",  # imports torch._dynamo halfway through inductor
        "import _flagos_compile_lazy as lazy",
        "lazy.install()",
        "assert 'flagos_compile' not in sys.modules, 'registered too early'",
        "m = torch.nn.Linear(8, 8).to('flagos')",
        "x = torch.randn(4, 8, device='flagos')",
        "y = torch.compile(m)(x)",  # the first compilation: registration happens here
        "import flagos_compile",
        "assert flagos_compile.is_registered()",
        "torch.testing.assert_close(y.cpu(), m(x).cpu())",
        "print('ok')",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_backend_name_first_thing_in_a_fresh_process() -> None:
    """backend="flagos" as the first use of torch.compile: torch loads the backend's entry
    point, whose import registers flagos; the name is registered once, by torch."""
    code = (
        "import importlib.metadata as md, torch\n"
        "eps = [e for e in md.entry_points(group='torch_dynamo_backends') if e.name == 'flagos']\n"
        "m = torch.nn.Linear(4, 4).to('flagos')\n"
        "x = torch.randn(2, 4, device='flagos')\n"
        "y = torch.compile(m, backend='flagos')(x)\n"
        "torch.testing.assert_close(y.cpu(), m(x).cpu())\n"
        "print('ok', len(eps))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr[-3000:]


def test_a_reset_before_the_first_compilation_still_registers() -> None:
    """torch.compiler.reset() clears Dynamo's compile-start callbacks; test suites call it
    in their set-up, before any compilation."""
    code = "\n".join([
        "import sys",
        f"sys.path.insert(0, {str(PKG_PYTHON)!r})",
        "import torch, flagos",
        "import _flagos_compile_lazy as lazy",
        "lazy.install()",
        "torch.compiler.reset()",
        "assert 'flagos_compile' not in sys.modules, 'registered too early'",
        "m = torch.nn.Linear(8, 8).to('flagos')",
        "x = torch.randn(4, 8, device='flagos')",
        "y = torch.compile(m)(x)",
        "torch.testing.assert_close(y.cpu(), m(x).cpu())",
        "torch.compiler.reset()",  # after registering: torch's own clear again
        "torch.testing.assert_close(torch.compile(m)(x).cpu(), m(x).cpu())",
        "print('ok')",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr[-3000:]
