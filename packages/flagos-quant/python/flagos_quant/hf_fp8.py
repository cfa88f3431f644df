"""The HF ``fp8`` block format (``quant_method: "fp8"``, transformers'
``FineGrainedFP8Config``; DeepSeek-V3, Qwen3-FP8 and others) loaded onto flagos: every
converted linear layer becomes a :class:`~flagos_quant.modules.FP8BlockLinear` holding the
checkpoint's ``weight`` (float8_e4m3fn [N, K]) and ``weight_scale_inv`` (float32, one per
128x128 block: the dequantization multiplier) as they are stored; activations are
quantized per 1x128 block at each call (``activation_scheme: "dynamic"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .checkpoint_config import QuantConfigError
from .modules import FP8BlockLinear

__all__ = ["HFFP8Spec", "parse_hf_fp8", "quantizer_class"]

BLOCK = (128, 128)


@dataclass(frozen=True)
class HFFP8Spec:
    """What an HF ``fp8`` checkpoint stores: E4M3 weights with float32 scales per
    ``block``, activations quantized per 1x128 at run time; ``skip``: module names kept in
    full precision (``modules_to_not_convert``, transformers' matching rules)."""

    block: tuple[int, int] = BLOCK
    skip: tuple[str, ...] = ()


def parse_hf_fp8(config: Mapping[str, Any]) -> HFFP8Spec:
    """The :class:`HFFP8Spec` of an HF ``fp8`` ``quantization_config`` (the checkpoint's
    dict, or ``FineGrainedFP8Config.to_dict()``); raises :class:`QuantConfigError` naming
    the field for anything flagos cannot load as stored."""
    scheme = str(config.get("activation_scheme", "dynamic")).lower()
    if scheme != "dynamic":
        raise QuantConfigError("activation_scheme", f"{config.get('activation_scheme')!r} is "
                               "not supported; supported: 'dynamic' (per-1x128 activation "
                               "scales computed at each call)")
    block = config.get("weight_block_size", list(BLOCK))
    if block is None or not isinstance(block, (list, tuple)) or tuple(block) != BLOCK:
        raise QuantConfigError("weight_block_size", f"{block!r} is not supported; supported: "
                               "[128, 128]")
    fmt = config.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise QuantConfigError("fmt", f"{fmt!r} is not supported; supported: 'e4m3'")
    scale_fmt = config.get("scale_fmt", "float")
    if scale_fmt != "float":
        raise QuantConfigError("scale_fmt", f"{scale_fmt!r} is not supported; supported: "
                               "'float' (float32 block scales)")
    if config.get("modules_to_convert"):
        raise QuantConfigError("modules_to_convert", "FP8 embeddings "
                               f"({config['modules_to_convert']!r}) are not supported")
    if config.get("expert_dtype", "fp8") != "fp8":
        raise QuantConfigError("expert_dtype", f"{config['expert_dtype']!r} is not supported; "
                               "supported: 'fp8'")
    skip = config.get("modules_to_not_convert")
    if skip is None:
        skip = []
    if isinstance(skip, str) or not isinstance(skip, (list, tuple)) or \
            not all(isinstance(s, str) for s in skip):
        raise QuantConfigError("modules_to_not_convert",
                               f"must be a list of module names, got {skip!r}")
    return HFFP8Spec(BLOCK, tuple(skip))


class _Skips:
    """``converts(name)`` for :func:`~flagos_quant.convert.replace_linears` with
    transformers' own matching of ``modules_to_not_convert``."""

    def __init__(self, patterns: list[str]) -> None:
        from transformers.quantizers.quantizers_utils import should_convert_module

        self._patterns, self._should = patterns, should_convert_module

    def converts(self, name: str) -> bool:
        return self._should(name, self._patterns)


def quantizer_class() -> type:
    """flagos' quantizer for HF ``fp8`` checkpoints (a transformers ``HfQuantizer``)."""
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    from .convert import replace_linears
    from .hf_prequantized import prequantized_quantizer_base, reject_fused_experts
    from .hf_takeover import checkpoint_fields

    class FlagosFP8BlockQuantizer(prequantized_quantizer_base()):
        """Loads pre-quantized HF ``fp8`` checkpoints into FP8BlockLinear layers."""

        @property
        def quantized_element_size(self) -> float:
            return 1.0

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            config = self.quantization_config
            fields = checkpoint_fields(config) or {}  # what transformers' config drops
            self.spec = parse_hf_fp8({**config.to_dict(), **fields})

        def _process_model_before_weight_loading(self, model, **kwargs):
            # transformers' own names of the layers kept in full precision
            FineGrainedFP8HfQuantizer._normalize_modules_to_not_convert(self, model)
            skip = self.get_modules_to_not_convert(
                model, self.quantization_config.modules_to_not_convert,
                model._keep_in_fp32_modules)
            skips = _Skips(skip)
            reject_fused_experts(model, lambda name, _: skips.converts(name), "FP8",
                                 "load with quantization_config=FineGrainedFP8Config("
                                 "dequantize=True) to get a bf16 model")
            dtype = kwargs.get("dtype") or model.dtype

            def new_layer(name: str, old: nn.Linear, layer_dtype: torch.dtype) -> FP8BlockLinear:
                return FP8BlockLinear(old.in_features, old.out_features, old.bias is not None,
                                      block=self.spec.block, dtype=layer_dtype,
                                      device=old.weight.device)

            replace_linears(model, skips, dtype=dtype, new_layer=new_layer)
            return model

    return FlagosFP8BlockQuantizer
