"""gpt-oss MXFP4 checkpoints (``quant_method: "mxfp4"``) loaded onto flagos with their
expert weights packed.

transformers registers ``mxfp4`` itself; without OpenAI's Triton MoE kernels (the
``kernels`` package, CUDA/XPU) it dequantizes the experts to bf16 at load. flagos-quant
puts a subclass of transformers' own quantizer in its place (:func:`flagos_quantizer`)
that takes over only when ``device_map`` puts the model on flagos: the experts become
:class:`~.mxfp4_moe.Mxfp4Experts` and the checkpoint's ``*_blocks`` / ``*_scales`` load into
them as stored. Every other load (``device_map="cpu"``, ``dequantize=True``, quantizing a
bf16 model) is transformers' own code path, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checkpoint_config import QuantConfigError

__all__ = ["Mxfp4Spec", "flagos_quantizer", "parse_mxfp4", "replace_experts",
           "targets_flagos"]

_AUTO_PLACEMENTS = ("auto", "balanced", "balanced_low_0", "sequential")


@dataclass(frozen=True)
class Mxfp4Spec:
    """What an ``mxfp4`` config asks for: the module name patterns left unconverted
    (``modules_to_not_convert``, transformers' matching rules: a prefix up to a module
    boundary, a regular expression, or a suffix)."""

    modules_to_not_convert: tuple[str, ...] | None = None


def parse_mxfp4(config: object) -> Mxfp4Spec:
    """The :class:`Mxfp4Spec` of an ``mxfp4`` quantization config (transformers'
    ``Mxfp4Config`` or its dict); raises :class:`~.checkpoint_config.QuantConfigError`
    naming the malformed field."""
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    skip = get("modules_to_not_convert")
    if skip is not None:
        if isinstance(skip, str):
            skip = [skip]
        if not isinstance(skip, (list, tuple)) or not all(isinstance(s, str) for s in skip):
            raise QuantConfigError("modules_to_not_convert",
                                   f"must be a list of module name patterns, got {skip!r}")
        skip = tuple(skip)
    dequantize = get("dequantize", False)
    if not isinstance(dequantize, bool):
        raise QuantConfigError("dequantize", f"must be true or false, got {dequantize!r}")
    return Mxfp4Spec(skip)


def targets_flagos(device_map: object) -> bool:
    """Whether ``device_map`` (``from_pretrained``'s argument) names flagos for some module:
    a device, device string or index, or a dict of them. Automatic placements ("auto",
    ...) are not: accelerate decides them after the quantizer is chosen, and today it
    places on the CPU what it does not know the memory of."""
    values = device_map.values() if isinstance(device_map, dict) else (device_map,)
    for v in values:
        if v is None or v == "disk" or v in _AUTO_PLACEMENTS:
            continue
        try:
            if torch.device(v).type == "flagos":
                return True
        except (RuntimeError, TypeError):
            continue
    return False


def replace_experts(model: torch.nn.Module, modules_to_not_convert: list[str] | None,
                    dtype: torch.dtype) -> list[str]:
    """Replace the ``GptOssExperts`` of every gpt-oss MoE layer of ``model`` (built on the
    meta device) that ``modules_to_not_convert`` does not name by :class:`Mxfp4Experts`;
    returns the replaced module names."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    from transformers.quantizers.quantizers_utils import should_convert_module

    from .mxfp4_moe import Mxfp4Experts

    replaced = []
    for name, module in list(model.named_modules()):
        if isinstance(module, GptOssExperts) and should_convert_module(name, modules_to_not_convert):
            device = module.gate_up_proj.device
            config = getattr(module, "config", None) or model.config.get_text_config()
            model.set_submodule(name, Mxfp4Experts.from_config(config, dtype, device))
            replaced.append(name)
    return replaced


def flagos_quantizer(base: type) -> type:
    """transformers' ``mxfp4`` quantizer class ``base`` extended to load onto flagos with
    the expert weights packed; every load that does not target flagos runs ``base``'s
    code as it is."""

    class FlagosMxfp4Quantizer(base):
        """transformers' MXFP4 quantizer; for a pre-quantized gpt-oss checkpoint loaded
        with a ``device_map`` on flagos (and ``dequantize`` not set) it keeps the experts'
        MXFP4 blocks and scales packed in :class:`Mxfp4Experts` instead."""

        on_flagos = False

        def validate_environment(self, *args, **kwargs):
            if self.pre_quantized and targets_flagos(kwargs.get("device_map")):
                parse_mxfp4(self.quantization_config)
                self.on_flagos = not self.quantization_config.dequantize
            if not self.on_flagos:
                return super().validate_environment(*args, **kwargs)

        def _process_model_before_weight_loading(self, model, **kwargs):
            if not self.on_flagos:
                return super()._process_model_before_weight_loading(model, **kwargs)
            spec = parse_mxfp4(self.quantization_config)
            self.modules_to_not_convert = self.get_modules_to_not_convert(
                model, list(spec.modules_to_not_convert) if spec.modules_to_not_convert
                is not None else None, model._keep_in_fp32_modules)
            replaced = replace_experts(model, self.modules_to_not_convert,
                                       kwargs.get("dtype") or model.dtype)
            if not replaced:
                raise QuantConfigError(
                    "quant_method", f"'mxfp4' checkpoints hold gpt-oss MoE experts "
                    f"(GptOssExperts), and {type(model).__name__} has none to load them into "
                    "(or modules_to_not_convert names them all)")
            return model

        def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
            if not self.on_flagos:
                return super().param_needs_quantization(model, param_name, **kwargs)
            return False  # the packed tensors load as they are stored

        def get_weight_conversions(self):
            return [] if self.on_flagos else super().get_weight_conversions()

        def update_weight_conversions(self, weight_conversions, *args, **kwargs):
            # (transformers 5.23 passes the model too, 5.17 does not)
            if self.on_flagos:
                return weight_conversions
            return super().update_weight_conversions(weight_conversions, *args, **kwargs)

        def get_state_dict_and_metadata(self, model):
            if self.on_flagos:  # the modules hold the checkpoint's own tensors and names
                return None, {}
            return super().get_state_dict_and_metadata(model)

    FlagosMxfp4Quantizer.__qualname__ = FlagosMxfp4Quantizer.__name__
    return FlagosMxfp4Quantizer
