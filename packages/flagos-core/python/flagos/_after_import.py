"""Run a callback right after a module has been imported (or now, if it has been), without
importing it: how flagos adapts libraries that it does not depend on (transformers) only
in processes that use them."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType

_lock = threading.Lock()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds ``name`` through the other finders and runs ``callback(module)`` once the
    module has executed; then leaves ``sys.meta_path``."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            with _lock:
                sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            _call(self.callback, module)

        spec.loader.exec_module = exec_module
        return spec


def _call(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception as e:  # noqa: BLE001 - never break the library's import
        warnings.warn(f"flagos: adapting {module.__name__} failed: {e!r}", RuntimeWarning,
                      stacklevel=3)


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """``callback(module)`` once module ``name`` is imported: now if it is, else right after
    its import (a ``sys.meta_path`` finder). An exception in the callback warns; it never
    breaks the import."""
    if name in sys.modules:
        _call(callback, sys.modules[name])
        return
    with _lock:
        if not any(isinstance(f, _AfterImport) and f.name == name and f.callback == callback
                   for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(name, callback))
