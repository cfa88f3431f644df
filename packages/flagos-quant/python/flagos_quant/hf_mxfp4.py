"""gpt-oss MXFP4 checkpoints (``quant_method: "mxfp4"``) loaded onto flagos with their
expert weights packed.

transformers registers ``mxfp4`` itself; without OpenAI's Triton MoE kernels (the
``kernels`` package, CUDA/XPU) it dequantizes the experts to bf16 at load. For loads onto
flagos the registry entry is taken over (:mod:`.hf_takeover`) by flagos' quantizer
(:func:`quantizer_class`): the experts become :class:`~.mxfp4_moe.Mxfp4Experts` and the
checkpoint's ``*_blocks`` / ``*_scales`` load into them as stored. Every other load
(``device_map="cpu"``, ``dequantize=True``, quantizing a bf16 model) is transformers' own
code path, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checkpoint_config import QuantConfigError

__all__ = ["Mxfp4Spec", "parse_mxfp4", "quantizer_class", "replace_experts"]


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
    return Mxfp4Spec(skip)


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


def quantizer_class() -> type:
    """flagos' quantizer for pre-quantized gpt-oss ``mxfp4`` checkpoints (a transformers
    ``HfQuantizer``): the experts' MXFP4 blocks and scales stay packed in
    :class:`Mxfp4Experts`."""
    from .hf_prequantized import prequantized_quantizer_base

    class FlagosMxfp4Quantizer(prequantized_quantizer_base()):
        """Loads gpt-oss MXFP4 experts into Mxfp4Experts, the other layers as stored."""

        def validate_environment(self, *args, **kwargs) -> None:
            self.spec = parse_mxfp4(self.quantization_config)

        def _process_model_before_weight_loading(self, model, **kwargs):
            skip = self.spec.modules_to_not_convert
            self.modules_to_not_convert = self.get_modules_to_not_convert(
                model, list(skip) if skip is not None else None, model._keep_in_fp32_modules)
            replaced = replace_experts(model, self.modules_to_not_convert,
                                       kwargs.get("dtype") or model.dtype)
            if not replaced:
                raise QuantConfigError(
                    "quant_method", f"'mxfp4' checkpoints hold gpt-oss MoE experts "
                    f"(GptOssExperts), and {type(model).__name__} has none to load them into "
                    "(or modules_to_not_convert names them all)")
            return model

        def is_serializable(self) -> bool:
            # the modules hold the checkpoint's own tensors under its names: the model's
            # state dict is the checkpoint (the base's get_state_dict_and_metadata)
            return True

    return FlagosMxfp4Quantizer
