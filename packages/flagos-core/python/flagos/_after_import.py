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


def _initializing(module: ModuleType) -> bool:
    # importlib marks a module's spec while its code runs: torch loads flagos (its backend
    # entry point) from whichever module imports torch first, half-way through that module.
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class _WhenImported(importlib.abc.MetaPathFinder):
    """Holds callbacks for modules that were still executing when they were registered, and
    runs each at the first import (of any module, or a later :func:`after_import`) after its
    module has finished; finds nothing itself. Once installed it stays in ``sys.meta_path``:
    importlib walks that list while it asks each finder, so a finder that removed itself
    would make the import skip the finder after it."""

    def __init__(self) -> None:
        self.waiting: list[tuple[ModuleType, Callable[[ModuleType], None]]] = []

    def run_finished(self) -> None:
        if not self.waiting:
            return
        with _lock:
            done = [(m, c) for m, c in self.waiting if not _initializing(m)]
            self.waiting = [w for w in self.waiting if w not in done]
        for module, callback in done:
            if sys.modules.get(module.__name__) is module:
                _call(callback, module)
            else:  # its import failed: wait for the next one
                after_import(module.__name__, callback)

    def find_spec(self, name, path, target=None):
        self.run_finished()


_when_imported = _WhenImported()


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """``callback(module)`` once module ``name`` is imported: now if it is, else right after
    its import (a ``sys.meta_path`` finder). A module still executing (it imported torch,
    which loaded flagos) is adapted at the first import after it has finished. An exception
    in the callback warns; it never breaks the import."""
    _when_imported.run_finished()
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        _call(callback, module)
        return
    with _lock:
        if module is not None:
            if (module, callback) not in _when_imported.waiting:
                _when_imported.waiting.append((module, callback))
            if _when_imported not in sys.meta_path:
                sys.meta_path.insert(0, _when_imported)
        elif not any(isinstance(f, _AfterImport) and f.name == name and f.callback == callback
                     for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(name, callback))
