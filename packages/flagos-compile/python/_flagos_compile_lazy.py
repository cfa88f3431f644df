"""The ``flagos.plugins`` entry point of flagos-compile: registration on first use.

Registering flagos with Dynamo and Inductor imports both (about 1.5 s), and flagos
plugins load during ``import torch``. So this plugin only watches for ``torch._dynamo``
to be imported (which ``torch.compile`` does) and registers right after that import
completes; if it is imported already, it registers at once. ``import flagos_compile``
still registers eagerly. This module lives outside the package so that loading it does
not import the package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading

_WATCHED = "torch._dynamo"
_lock = threading.Lock()


def _register() -> None:
    import flagos_compile

    flagos_compile.register()


class _RegisterAfterDynamo(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of torch._dynamo so that flagos-compile
    registers once that module has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != _WATCHED:
            return None
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_register(module) -> None:
            exec_module(module)
            _register()

        loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Register now if Dynamo is loaded, else when it first is."""
    if _WATCHED in sys.modules:
        _register()
        return
    with _lock:
        if not any(isinstance(f, _RegisterAfterDynamo) for f in sys.meta_path):
            sys.meta_path.insert(0, _RegisterAfterDynamo())
