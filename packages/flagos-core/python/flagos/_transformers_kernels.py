"""transformers' hub kernels on flagos: they decline, and the model's own PyTorch code runs.

transformers (5.24 and newer) turns on its hub-kernel integration by default: loading a
model (``from_pretrained``) or switching it between training and inference calls
``kernelize``, and the ``kernels`` library it calls accepts only a fixed list of device
types (cpu, cuda, mps, ...; no extension point), raising ``Unsupported device type
'flagos'``. For a model on flagos, transformers' ``kernelize`` is wrapped to leave the
model as it is: no hub kernel replaces a layer, as when a device has none, and
``model.use_kernels`` stays False. A patch of transformers (docs/architecture.md, "Patches
of other libraries"); every other model goes through transformers' own ``kernelize``.

The function is wrapped where it is defined (``integrations.hub_kernels``), before
``modeling_utils`` binds its name, and in ``modeling_utils`` too, which ever is imported
when flagos is.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

from flagos._library_places import device_type

log = logging.getLogger("flagos")
MODULES = ("transformers.integrations.hub_kernels", "transformers.modeling_utils")


def _on_flagos(model: Any, device_map: Any) -> bool:
    if isinstance(device_map, dict):
        devices = {device_type(d) for d in device_map.values()} - {"cpu", "disk", "meta"}
        if devices:
            return devices == {"flagos"}
    device = getattr(model, "device", None)
    return getattr(device, "type", None) == "flagos"


def adapt(module: ModuleType) -> None:
    """Wrap ``module.kernelize`` (the name transformers' models call) once."""
    original = getattr(module, "kernelize", None)
    if original is None or getattr(original, "_flagos_declines", False):
        return

    @functools.wraps(original)
    def kernelize(model: Any, *args: Any, **kwargs: Any) -> Any:
        if _on_flagos(model, kwargs.get("device_map")):
            log.info("flagos: hub kernels do not serve the flagos device; %s keeps its own "
                     "PyTorch layers", type(model).__name__)
            return None
        return original(model, *args, **kwargs)

    kernelize._flagos_declines = True  # type: ignore[attr-defined]
    module.kernelize = kernelize


def install() -> None:
    """Adapt transformers when (if ever) its hub-kernel integration is imported."""
    from flagos._after_import import after_import

    for name in MODULES:
        after_import(name, adapt)
