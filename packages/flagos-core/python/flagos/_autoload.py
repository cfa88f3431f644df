"""The ``torch.backends`` entry point: ``import torch`` makes ``flagos`` usable.

A broken installation must never break ``import torch``: any failure here becomes a
warning naming the cause (torch itself would turn it into an import error).
"""

from __future__ import annotations

import warnings


def autoload() -> None:
    """Import flagos; on any failure warn instead of raising."""
    try:
        import flagos  # noqa: F401
    except Exception as e:  # noqa: BLE001 - see module docstring
        warnings.warn(
            f"flagos: the flagos device could not be loaded and is unavailable: {e!r}. "
            "Set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to skip loading it.",
            RuntimeWarning,
            stacklevel=2,
        )
