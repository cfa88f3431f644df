"""``torch.backends`` entry point: plain ``import torch`` registers the flagos c10d backend.

Like flagos-core's autoload, a failure here must never break ``import torch``: it warns.
"""

from __future__ import annotations

import warnings


def autoload() -> None:
    """Import flagos_distributed (which registers the backend); warn on any failure."""
    try:
        import flagos_distributed  # noqa: F401
    except Exception as e:  # noqa: BLE001 - see module docstring
        warnings.warn(
            f"flagos_distributed: the 'flagos' torch.distributed backend could not be "
            f"registered: {e!r}. Set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to skip loading it.",
            RuntimeWarning,
            stacklevel=2,
        )
