"""flagos adapts libraries after their import, also one that was still executing when
flagos loaded (it imported torch, which loads flagos through its backend entry point)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import textwrap

from flagos._after_import import after_import


def _write(tmp_path, name: str, code: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))


def test_a_module_imported_later_is_adapted_right_after_its_import(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path, "flagos_later_mod", "VALUE = 1\n")
    seen = []
    after_import("flagos_later_mod", lambda m: seen.append(m.VALUE))
    assert seen == []
    importlib.import_module("flagos_later_mod")
    assert seen == [1]
    sys.modules.pop("flagos_later_mod")


def test_a_module_still_executing_is_adapted_once_it_has_finished(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    # The module registers the callback half-way, as torch's import of flagos does from
    # inside whichever module imported torch first; its name is defined after that point.
    _write(tmp_path, "flagos_half_mod", """
        import flagos_half_hook
        late = "defined after the callback was registered"
        """)
    _write(tmp_path, "flagos_half_hook", """
        from flagos._after_import import after_import
        SEEN = []
        after_import("flagos_half_mod", lambda m: SEEN.append(getattr(m, "late", None)))
        """)
    _write(tmp_path, "flagos_half_next", "")
    importlib.import_module("flagos_half_mod")
    hook = sys.modules["flagos_half_hook"]
    assert hook.SEEN == []  # not called on the half-executed module
    importlib.import_module("flagos_half_next")  # the next import runs it
    assert hook.SEEN == ["defined after the callback was registered"]
    importlib.import_module("flagos_half_mod")  # once only
    assert len(hook.SEEN) == 1
    for name in ("flagos_half_mod", "flagos_half_hook", "flagos_half_next"):
        sys.modules.pop(name)


class _Serves(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds one module of its own, as setuptools' distutils finder does."""

    def find_spec(self, name, path, target=None):
        if name != "flagos_served_mod":
            return None
        return importlib.util.spec_from_loader(name, loader=self, origin="served")

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        pass


def test_the_import_that_runs_a_waiting_callback_still_reaches_every_finder(tmp_path,
                                                                            monkeypatch):
    from flagos._after_import import _when_imported

    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path, "flagos_wait_mod", """
        import flagos_wait_hook
        """)
    _write(tmp_path, "flagos_wait_hook", """
        from flagos._after_import import after_import
        SEEN = []
        after_import("flagos_wait_mod", SEEN.append)
        after_import("flagos_wait_mod", SEEN.append)  # the same callback again: run once
        """)
    importlib.import_module("flagos_wait_mod")
    serves = _Serves()
    sys.meta_path.insert(sys.meta_path.index(_when_imported) + 1, serves)
    try:
        # this import runs the waiting callback; the finder after the waiting one must
        # still be asked
        assert importlib.import_module("flagos_served_mod").__spec__.origin == "served"
        assert [m.__name__ for m in sys.modules["flagos_wait_hook"].SEEN] == ["flagos_wait_mod"]
    finally:
        sys.meta_path.remove(serves)
        for name in ("flagos_wait_mod", "flagos_wait_hook", "flagos_served_mod"):
            sys.modules.pop(name, None)
