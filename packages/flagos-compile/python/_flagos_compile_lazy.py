"""The ``flagos.plugins`` entry point of flagos-compile: registration on first use.

Registering flagos with Dynamo and Inductor imports both (about 1.5 s), and flagos
plugins load during ``import torch``. So this plugin waits for the first compilation:
when ``torch._dynamo`` has been imported (which ``torch.compile`` does), it adds a
callback through Dynamo's ``on_compile_start`` extension point, and that callback
registers flagos-compile. Registering from inside an import would be fragile:
``torch._dynamo`` is often imported halfway through ``torch._inductor`` or ``torch.fx``
modules, and registration imports those. At the start of a compilation no import is in
progress. ``torch.compiler.reset()`` clears those callbacks; until flagos-compile has
registered, this plugin keeps its callback across a reset (it wraps the callback
handler's ``clear``: docs/architecture.md, "Patches of torch internals"). ``import
flagos_compile`` still registers eagerly. This module lives outside the package so that
loading it does not import the package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading

_WATCHED = "torch._dynamo"
_lock = threading.Lock()


def _register(_args: object = None) -> None:
    import flagos_compile

    flagos_compile.register()


def _on_compile_start(dynamo) -> None:  # dynamo: the torch._dynamo module
    # Only touches what torch._dynamo's own import has loaded: no import happens here.
    dynamo.callback.on_compile_start(_register)
    handler = getattr(dynamo.callback, "callback_handler", None)
    if handler is None or not callable(getattr(handler, "clear", None)):
        return
    # torch.compiler.reset() clears every compile-start callback: a process that resets
    # before its first compilation (test suites do, in their set-up) would never register.
    # Until flagos-compile has registered, the handler's clear puts this callback back.
    clear = handler.clear

    def clear_then_keep_registering() -> None:
        clear()
        package = sys.modules.get("flagos_compile")  # not imported: not registered
        if package is not None and package.is_registered():
            handler.clear = clear  # registered: torch's own clear from now on
        else:
            dynamo.callback.on_compile_start(_register)

    handler.clear = clear_then_keep_registering


class _RegisterAfterDynamo(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of torch._dynamo so that, once that module
    has executed, flagos-compile registers at the start of the first compilation."""

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
            _on_compile_start(module)

        loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Arrange for registration at the first compilation."""
    if _WATCHED in sys.modules and hasattr(sys.modules[_WATCHED], "callback"):
        _on_compile_start(sys.modules[_WATCHED])
        return
    with _lock:
        if not any(isinstance(f, _RegisterAfterDynamo) for f in sys.meta_path):
            sys.meta_path.insert(0, _RegisterAfterDynamo())
