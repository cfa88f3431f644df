"""Packed-weight linear layers of compressed-tensors checkpoints (llm-compressor's
exports), holding the tensors under compressed-tensors' names:

- ``float-quantized``: :class:`CTFP8Linear`, ``weight`` float8_e4m3fn [N, K] and
  ``weight_scale`` (one per tensor [1] or per output channel [N, 1]; held as float32,
  which every checkpoint scale dtype converts to exactly), optional ``input_scale`` [1];
- ``nvfp4-pack-quantized``: :class:`CTNVFP4Linear`, ``weight_packed`` uint8 [N, K/2] (two
  E2M1 values a byte, low nibble first), ``weight_scale`` float8_e4m3fn [N, K/16],
  ``weight_global_scale`` float32 [1] (a divisor: the reciprocal of ModelOpt's
  ``weight_scale_2``), optional ``input_global_scale`` float32 [1] (likewise).

``forward`` follows the checkpoint's ``input_activations``; a scheme without them computes
with full-precision activations (the format's weight-only schemes, e.g. W8A16, NVFP4A16).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .dequant import dequantize_fp4_over_global, dequantize_fp8
from .fused_linear import fp8_weight_linear, nvfp4_weight_linear
from .modules import QuantLinear, _frozen
from .ops import scaled_mm, scaled_mm_nvfp4
from .quantize import quantize_fp8, quantize_fp8_blocks, quantize_nvfp4

__all__ = ["FP8_ACTIVATIONS", "CTFP8Linear", "CTNVFP4Linear"]

FP8_ACTIVATIONS = ("static-tensor", "dynamic-tensor", "dynamic-token", None)
"""The activation schemes of :class:`CTFP8Linear` (None: activations not quantized)."""


class CTFP8Linear(QuantLinear):
    """compressed-tensors ``float-quantized`` FP8 weight, per tensor
    (``per_channel=False``) or per output channel; activations quantized as
    ``activations`` says: per tensor with the static ``input_scale``, per tensor or per
    token with scales computed at each call (amax / 448), or not at all."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 per_channel: bool = True, activations: str | None = "dynamic-token",
                 **kw) -> None:
        if activations not in FP8_ACTIVATIONS:
            raise ValueError(f"CTFP8Linear: activations must be one of {FP8_ACTIVATIONS}, "
                             f"got {activations!r}")
        super().__init__(in_features, out_features, bias, **kw)
        dev = kw.get("device")
        self.per_channel, self.activations = per_channel, activations
        self.weight = _frozen(torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn,
                                          device=dev))
        self.weight_scale = _frozen(torch.ones(out_features if per_channel else 1,
                                               *((1,) if per_channel else ()),
                                               dtype=torch.float32, device=dev))
        self.input_scale = _frozen(torch.ones(1, dtype=torch.float32, device=dev)) \
            if activations == "static-tensor" else None

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        block = (1, self.in_features) if self.per_channel else None
        return dequantize_fp8(self.weight, self.weight_scale, block).to(dtype)

    def _weight_only_forward(self, x: torch.Tensor) -> torch.Tensor:
        block = (1, self.in_features) if self.per_channel else None
        return fp8_weight_linear(x, self.weight, self.weight_scale, block, self.bias)

    def _quantized_forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        if self.activations is None:
            return self._weight_only_forward(x)
        if self.activations == "dynamic-token":
            xq, xs = quantize_fp8_blocks(x, (1, self.in_features))  # xs [M, 1]
        else:
            xq, xs = quantize_fp8(x, self.input_scale)
        # scale_b in torch's layout for b = weight.t() [K, N]: [1, N] rowwise, or one element
        ws = self.weight_scale.reshape(1, -1) if self.per_channel \
            else self.weight_scale.reshape(())
        return scaled_mm(xq, self.weight.t(), xs, ws, self.bias, out_dtype)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, per_channel={self.per_channel}, "
                f"activations={self.activations}")


def _reciprocal(divisor: torch.Tensor) -> torch.Tensor:
    return (1.0 / divisor.float()).reshape(())


class CTNVFP4Linear(QuantLinear):
    """compressed-tensors ``nvfp4-pack-quantized`` weight; with ``quantize_input``,
    activations are quantized to NVFP4 per 16 at each call (dynamic E4M3 block scales,
    the static ``input_global_scale``), else they stay full precision (NVFP4A16)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 quantize_input: bool = True, block_size: int = 16, **kw) -> None:
        if in_features % block_size:
            raise ValueError(f"CTNVFP4Linear: in_features {in_features} is not a multiple of "
                             f"the block size {block_size}")
        super().__init__(in_features, out_features, bias, **kw)
        dev = kw.get("device")
        self.block_size, self.quantize_input = block_size, quantize_input
        self.weight_packed = _frozen(torch.zeros(out_features, in_features // 2,
                                                 dtype=torch.uint8, device=dev))
        self.weight_scale = _frozen(torch.ones(out_features, in_features // block_size,
                                               dtype=torch.float8_e4m3fn, device=dev))
        self.weight_global_scale = _frozen(torch.ones(1, dtype=torch.float32, device=dev))
        self.input_global_scale = _frozen(torch.ones(1, dtype=torch.float32, device=dev)) \
            if quantize_input else None

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return dequantize_fp4_over_global(self.weight_packed, self.weight_scale,
                                          self.block_size, self.weight_global_scale).to(dtype)

    def _weight_only_forward(self, x: torch.Tensor) -> torch.Tensor:
        # the packed-weight op multiplies by a global scale: compressed-tensors' divisor
        # as its float32 reciprocal (relative difference at most 2^-24)
        if self.block_size != 16:
            return F.linear(x, self.dequantized_weight(x.dtype), self.bias)
        return nvfp4_weight_linear(x, self.weight_packed, self.weight_scale,
                                   _reciprocal(self.weight_global_scale), self.bias)

    def _quantized_forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        if not self.quantize_input:
            return self._weight_only_forward(x)
        # the NVFP4 scaled matmul multiplies by global scales: compressed-tensors' divisors
        # as their float32 reciprocals (relative difference at most 2^-24)
        a_global = _reciprocal(self.input_global_scale)
        b_global = _reciprocal(self.weight_global_scale)
        xq, xs, xg = quantize_nvfp4(x, a_global, self.block_size)
        fp4 = torch.float4_e2m1fn_x2
        return scaled_mm_nvfp4(xq.view(fp4), xs, xg, self.weight_packed.view(fp4).t(),
                               self.weight_scale, b_global, self.bias, out_dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, quantize_input={self.quantize_input}"
