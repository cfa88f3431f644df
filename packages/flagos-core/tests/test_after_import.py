"""flagos adapts libraries after their import, also one that was still executing when
flagos loaded (it imported torch, which loads flagos through its backend entry point)."""

from __future__ import annotations

import importlib
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
