"""``torch.flagos.amp``: ``torch.cuda.amp`` for flagos devices.

As torch.cuda.amp's, these are deprecated spellings of ``torch.amp`` with the device type
filled in (``torch.amp.autocast("flagos", ...)``, ``torch.amp.GradScaler("flagos", ...)``),
kept so that code written against ``torch.cuda.amp`` runs on flagos with the module
swapped; they warn as torch.cuda.amp's do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from typing_extensions import deprecated

__all__ = ["GradScaler", "amp_definitely_not_available", "autocast", "custom_bwd", "custom_fwd"]


def amp_definitely_not_available() -> bool:
    """True when no flagos device is usable, so that autocast on flagos cannot work."""
    return not torch.flagos.is_available()


@deprecated("`torch.flagos.amp.autocast(args...)` is deprecated. "
            "Please use `torch.amp.autocast('flagos', args...)` instead.", category=FutureWarning)
class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast("flagos", ...)``."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True) -> None:
        super().__init__("flagos", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


@deprecated("`torch.flagos.amp.custom_fwd(args...)` is deprecated. "
            "Please use `torch.amp.custom_fwd(args..., device_type='flagos')` instead.",
            category=FutureWarning)
def custom_fwd(fwd: Callable | None = None, *, cast_inputs: torch.dtype | None = None) -> Any:
    """``torch.amp.custom_fwd(..., device_type="flagos")``."""
    return functools.partial(torch.amp.custom_fwd, device_type="flagos")(
        fwd=fwd, cast_inputs=cast_inputs)


@deprecated("`torch.flagos.amp.custom_bwd(args...)` is deprecated. "
            "Please use `torch.amp.custom_bwd(args..., device_type='flagos')` instead.",
            category=FutureWarning)
def custom_bwd(bwd: Callable) -> Any:
    """``torch.amp.custom_bwd(..., device_type="flagos")``."""
    return functools.partial(torch.amp.custom_bwd, device_type="flagos")(bwd)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("flagos", ...)``."""

    @deprecated("`torch.flagos.amp.GradScaler(args...)` is deprecated. "
                "Please use `torch.amp.GradScaler('flagos', args...)` instead.",
                category=FutureWarning)
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        super().__init__("flagos", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
