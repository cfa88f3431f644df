"""flagos-quant: FP8 and FP4 models on chips without FP8/FP4 units.

- :mod:`.dequant`, :mod:`.fp4`, :mod:`.scales`: the formats' dequantization rules;
  :mod:`.quantize`: the matching quantizers.
- The op provider ``emulation`` (:mod:`.provider`): ``torch._scaled_mm`` and
  ``torch.nn.functional.scaled_mm`` on flagos for tensorwise, rowwise, 1x128 / 128x128
  block, MX (e8m0 per 32) and NVFP4 (e4m3 per 16 + global) scales, by
  dequantize-then-matmul; routed like every op.
- :mod:`.modules`, :mod:`.ct_modules`: linear layers that keep weights packed and
  dequantize per call.
- Loading: ModelOpt FP8 / NVFP4, HF ``fp8`` (:mod:`.hf_fp8`), compressed-tensors
  (:mod:`.compressed_tensors`) and gpt-oss ``mxfp4`` (:mod:`.hf_mxfp4`) checkpoints
  through transformers' quantizer registry (:mod:`.transformers_hook`,
  :mod:`.hf_takeover`), ``from_pretrained(path, device_map="flagos")`` unchanged.
- :mod:`.mxfp4_moe`: gpt-oss' MoE experts with MXFP4 weights packed.

See docs/quantization.md.
"""

from __future__ import annotations

from .checkpoint_config import QuantConfigError, QuantSpec, parse_modelopt
from .convert import quantize_linears, replace_linears
from .dequant import dequantize_fp4, dequantize_fp8
from .modules import FP8BlockLinear, FP8Linear, NVFP4Linear, QuantLinear, set_weight_only
from .mxfp4_moe import Mxfp4Experts, dequantize_mxfp4
from .quantize import quantize_fp8, quantize_fp8_blocks, quantize_mxfp4, quantize_nvfp4
from .scaled_mm import emulated_scaled_mm, emulated_scaled_mm_v2

__all__ = [
    "FP8BlockLinear", "FP8Linear", "NVFP4Linear", "QuantConfigError", "QuantLinear",
    "QuantSpec", "dequantize_fp4", "dequantize_fp8", "emulated_scaled_mm",
    "emulated_scaled_mm_v2", "parse_modelopt", "quantize_fp8", "quantize_fp8_blocks",
    "quantize_linears", "quantize_nvfp4", "replace_linears", "set_weight_only",
]
__all__ += ["Mxfp4Experts", "dequantize_mxfp4", "quantize_mxfp4"]

# Imported by flagos itself (the provider entry point) before its plugins load: register
# with transformers from here too (a post-import hook; transformers is not imported).
from . import transformers_hook as _transformers_hook

_transformers_hook.install()
