"""How the libraries flagos adapts (transformers, accelerate) name where a tensor goes: a
device string (``"flagos:1"``), a ``torch.device``, an index (the current accelerator's,
as ``torch.device(0)`` reads it), or a place that is no device (``"disk"``, ``"meta"``)."""

from __future__ import annotations

from typing import Any

import torch


def device_type(place: Any) -> str:
    """The device type ``place`` names (``"flagos"``, ``"cpu"``, ...), or the place itself
    where it names no device (``"disk"``)."""
    if place in ("disk", "meta"):
        return str(place)
    try:
        return torch.device(place).type
    except (RuntimeError, TypeError, ValueError):
        return str(place)
