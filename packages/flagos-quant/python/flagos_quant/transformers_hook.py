"""ModelOpt checkpoints in transformers: a quantization config and quantizer registered
under ``quant_method: "modelopt"`` through transformers' registry
(``register_quantization_config`` / ``register_quantizer``), so that unchanged code::

    AutoModelForCausalLM.from_pretrained(path, device_map="flagos")

builds the model with packed-weight layers (:mod:`.modules`) and loads the checkpoint's
tensors into them as they are stored (FP8 stays FP8, NVFP4 stays packed).

Formats transformers serves itself (``fp8``, ``compressed-tensors``, ``mxfp4``) are taken
over for loads onto flagos only (:mod:`.hf_takeover`, the table :data:`TAKEOVERS`); every
other load of them stays with transformers' own quantizer.

Registration happens when transformers' quantizer registry is first imported (a
post-import hook installed by the ``flagos.plugins`` entry point at ``import flagos``), so
neither ``import torch`` nor ``import flagos`` imports transformers. A transformers that
registers ``modelopt`` itself keeps its own.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any

__all__ = ["TAKEOVERS", "install", "register", "registered", "taken_over"]

_REGISTRY_MODULE = "transformers.quantizers.auto"
_lock = threading.Lock()
registered: str | None = None
"""None until registration ran; then "registered" or why it was skipped."""

TAKEOVERS: dict[str, tuple[str, bool]] = {
    # quant_method: (module:function giving flagos' quantizer class, whether transformers'
    # config class is wrapped too, to keep the checkpoint's own fields and defer its errors)
    "fp8": ("flagos_quant.hf_fp8:quantizer_class", True),
    "compressed-tensors": ("flagos_quant.compressed_tensors:quantizer_class", True),
    "mxfp4": ("flagos_quant.hf_mxfp4:quantizer_class", False),
}
taken_over: dict[str, str] = {}
"""quant_method -> "taken over" or why not (filled by :func:`register`)."""


def register() -> str:
    """Take over the methods of :data:`TAKEOVERS` for loads onto flagos and register the
    ModelOpt config and quantizer with transformers now (idempotent); returns
    "registered" or why the ModelOpt registration was skipped (:data:`taken_over` says
    what was taken over)."""
    global registered
    with _lock:
        if registered is not None:
            return registered
        from transformers.quantizers import auto

        _take_over()
        if "modelopt" in auto.AUTO_QUANTIZER_MAPPING or "modelopt" in \
                auto.AUTO_QUANTIZATION_CONFIG_MAPPING:
            registered = "skipped: this transformers registers 'modelopt' itself"
            return registered
        config_cls, quantizer_cls = _classes()
        auto.register_quantization_config("modelopt")(config_cls)
        auto.register_quantizer("modelopt")(quantizer_cls)
        registered = "registered"
        return registered


def _take_over() -> None:
    import importlib

    from .hf_takeover import take_over

    for method, (target, config) in TAKEOVERS.items():
        module, _, function = target.partition(":")
        try:
            ours = getattr(importlib.import_module(module), function)()
            taken_over[method] = take_over(method, ours, config=config)
        except Exception as e:  # noqa: BLE001 - leave transformers' own quantizer
            taken_over[method] = f"failed: {type(e).__name__}: {e}"
            warnings.warn(f"flagos-quant: taking over {method!r} loads onto flagos failed: "
                          f"{e!r}", RuntimeWarning, stacklevel=3)


def _classes() -> tuple[type, type]:
    from transformers.utils.quantization_config import QuantizationConfigMixin

    from .checkpoint_config import parse_modelopt
    from .convert import replace_linears
    from .hf_prequantized import prequantized_quantizer_base

    class ModelOptConfig(QuantizationConfigMixin):
        """A ModelOpt checkpoint's ``quantization_config`` (validated when constructed)."""

        def __init__(self, **fields: Any) -> None:
            fields.pop("quant_method", None)
            self._fields = fields
            self.quant_method = "modelopt"
            self.spec = parse_modelopt(fields)
            self.quant_algo = self.spec.algo

        def to_dict(self) -> dict[str, Any]:
            return {"quant_method": "modelopt", **self._fields}

    class ModelOptQuantizer(prequantized_quantizer_base()):
        """Loads pre-quantized ModelOpt FP8 / NVFP4 checkpoints into packed-weight layers."""

        @property
        def quantized_element_size(self) -> float:
            return 1.0 if self.quantization_config.spec.algo == "FP8" else 0.5625

        def _process_model_before_weight_loading(self, model, **kwargs):
            spec = self.quantization_config.spec
            keep = tuple(getattr(model, "_keep_in_fp32_modules", None) or ())
            if keep:
                spec = type(spec)(spec.algo, spec.group_size, spec.ignore + tuple(
                    f"*{k}*" for k in keep))
            replace_linears(model, spec, dtype=kwargs.get("dtype") or model.dtype)
            return model

    return ModelOptConfig, ModelOptQuantizer


def _register_after_import(_module: object) -> None:
    global registered
    try:
        register()
    except Exception as e:
        registered = f"failed: {type(e).__name__}: {e}"
        raise  # after_import warns; transformers' import goes on


def install() -> None:
    """Entry point of group ``flagos.plugins``: register now if transformers' registry is
    imported already, else when it is."""
    from flagos.provider_api import after_import

    if _REGISTRY_MODULE in sys.modules:
        register()
        return
    after_import(_REGISTRY_MODULE, _register_after_import)
