"""The ``torch.backends`` entry point of flagos-core, kept outside the ``flagos`` package.

torch imports the entry point's module before calling it. Were the module inside
``flagos``, importing it would run ``flagos/__init__.py`` (which loads the HALs) outside
any ``try``, and a broken installation would make ``import torch`` fail. From here the
whole of ``import flagos`` happens inside :func:`flagos._autoload`-style protection.
"""

from __future__ import annotations

import warnings


def autoload() -> None:
    """Import flagos; on any failure warn (naming the cause) instead of raising."""
    try:
        import flagos  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a broken plugin must never break `import torch`
        warnings.warn(
            f"flagos: the flagos device could not be loaded and is unavailable: {e!r}. "
            "Set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to skip loading it.",
            RuntimeWarning,
            stacklevel=2,
        )
