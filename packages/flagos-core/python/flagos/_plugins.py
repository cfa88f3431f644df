"""Optional flagos packages that hook themselves in at import (entry points
``flagos.plugins``: flagos-distributed's ProcessGroup, flagos-compile's Inductor
registration). A plugin that fails warns and is skipped; flagos itself keeps working."""

from __future__ import annotations

import sys
import warnings
from importlib import metadata

GROUP = "flagos.plugins"
loaded: dict[str, str] = {}  # plugin name -> "ok" or the error text


def load_plugins() -> None:
    """Call every ``flagos.plugins`` entry point once."""
    for ep in metadata.entry_points(group=GROUP):
        if ep.name in loaded:
            continue
        if ep.module.split(".")[0] in sys.modules:
            # Being imported right now (it imported flagos) or imported already: such a
            # package registers itself when its import completes.
            loaded[ep.name] = "ok (registers on import)"
            continue
        try:
            ep.load()()
            loaded[ep.name] = "ok"
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break flagos
            loaded[ep.name] = f"{type(e).__name__}: {e}"
            warnings.warn(f"flagos: plugin {ep.name!r} ({ep.value}) failed to load: {e!r}",
                          RuntimeWarning, stacklevel=2)
