"""transformers' hub kernels on flagos: they decline, and the model's own PyTorch code runs.

transformers (5.24 and newer) turns on its hub-kernel integration by default: loading a
model (``from_pretrained``) or switching it between training and inference calls
``kernelize``, and the ``kernels`` library it calls accepts only a fixed list of device
types (cpu, cuda, mps, ...; no extension point), raising ``Unsupported device type
'flagos'``. For a model on flagos, transformers' ``kernelize`` is wrapped to leave the
model as it is: no hub kernel replaces a layer, as when a device has none, and
``model.use_kernels`` stays False. A patch of transformers (docs/architecture.md, "Patches
of other libraries"); every other model goes through transformers' own ``kernelize``.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

log = logging.getLogger("flagos")
MODULE = "transformers.modeling_utils"


def _on_flagos(model: Any, device_map: Any) -> bool:
    if isinstance(device_map, dict):
        devices = {str(d) for d in device_map.values()} - {"cpu", "disk", "meta"}
        if devices:
            return all(d.split(":")[0] == "flagos" for d in devices)
    device = getattr(model, "device", None)
    return getattr(device, "type", None) == "flagos"


def adapt(modeling_utils: ModuleType) -> None:
    """Wrap ``modeling_utils.kernelize`` (the name transformers' models call) once."""
    original = getattr(modeling_utils, "kernelize", None)
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
    modeling_utils.kernelize = kernelize


def install() -> None:
    """Adapt transformers when (if ever) its modeling_utils is imported."""
    from flagos._after_import import after_import

    after_import(MODULE, adapt)
