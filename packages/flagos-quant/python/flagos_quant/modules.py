"""Linear layers whose weights stay packed (FP8, NVFP4) and whose forward dequantizes per
call into the compute dtype; no dequantized copy of a weight is kept.

Each layer holds the tensors of its checkpoint format under the format's names, so a
checkpoint's state dict loads into it as it is. ``forward`` follows the format's own
activation scheme (``weight_only=False``: activations quantized as the format says, then a
scaled matmul) or, with ``weight_only=True``, multiplies full-precision activations by the
dequantized weight (the accuracy of the weights alone) in one op,
``flagos_quant::fp8_weight_linear`` / ``nvfp4_weight_linear`` (:mod:`.fused_linear`),
which a device with a fused kernel (Triton on CUDA) runs reading the packed weight once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .dequant import dequantize_fp4, dequantize_fp8
from .fused_linear import fp8_weight_linear, nvfp4_weight_linear
from .ops import scaled_mm, scaled_mm_nvfp4
from .quantize import quantize_fp8, quantize_fp8_blocks, quantize_nvfp4

__all__ = ["FP8BlockLinear", "FP8Linear", "NVFP4Linear", "QuantLinear", "set_weight_only"]


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


class QuantLinear(nn.Module):
    """Base of the packed-weight linear layers: ``y = x @ W.t() + bias`` with ``W`` stored
    quantized. ``bias`` (if any) is kept in the compute dtype."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 dtype: torch.dtype = torch.bfloat16, device: torch.device | str | None = None,
                 weight_only: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_only = weight_only
        self.bias = _frozen(torch.zeros(out_features, dtype=dtype, device=device)) if bias \
            else None

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight [out, in] dequantized into ``dtype`` (a new tensor on each call)."""
        raise NotImplementedError

    def _quantized_forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError

    def _weight_only_forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantized_weight(x.dtype), self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight_only:  # the ops take [..., K]: no reshapes (each a dispatched call)
            return self._weight_only_forward(x)
        flat = x.dim() == 2
        out = self._quantized_forward(x if flat else x.reshape(-1, self.in_features), x.dtype)
        return out if flat else out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, weight_only={self.weight_only}")


class FP8Linear(QuantLinear):
    """FP8 E4M3 weight with one float32 scale (``weight_scale``), as ModelOpt ``FP8``
    exports it; activations quantized per tensor with the static ``input_scale`` (or, with
    ``static_input=False``, a per-call amax scale)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 static_input: bool = True, **kw) -> None:
        super().__init__(in_features, out_features, bias, **kw)
        dev = kw.get("device")
        self.weight = _frozen(torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn,
                                          device=dev))
        self.weight_scale = _frozen(torch.ones((), dtype=torch.float32, device=dev))
        self.input_scale = _frozen(torch.ones((), dtype=torch.float32, device=dev)) \
            if static_input else None

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return dequantize_fp8(self.weight, self.weight_scale).to(dtype)

    def _weight_only_forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_weight_linear(x, self.weight, self.weight_scale, None, self.bias)

    def _quantized_forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        xq, xs = quantize_fp8(x, self.input_scale)
        return scaled_mm(xq, self.weight.t(), xs, self.weight_scale, self.bias, out_dtype)


class FP8BlockLinear(QuantLinear):
    """FP8 E4M3 weight with a float32 scale per 128x128 block (``weight_scale_inv``, the
    HF ``fp8`` / DeepSeek format); activations quantized per 1x128 block at each call."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 block: tuple[int, int] = (128, 128), **kw) -> None:
        super().__init__(in_features, out_features, bias, **kw)
        dev = kw.get("device")
        self.block = tuple(block)
        grid = (-(-out_features // block[0]), -(-in_features // block[1]))
        self.weight = _frozen(torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn,
                                          device=dev))
        self.weight_scale_inv = _frozen(torch.ones(grid, dtype=torch.float32, device=dev))

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return dequantize_fp8(self.weight, self.weight_scale_inv, self.block).to(dtype)

    def _weight_only_forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_weight_linear(x, self.weight, self.weight_scale_inv, self.block, self.bias)

    def _quantized_forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        if self.block != (128, 128):
            return F.linear(x, self.dequantized_weight(out_dtype), self.bias)
        xq, xs = quantize_fp8_blocks(x, (1, 128))
        return scaled_mm(xq, self.weight.t(), xs, self.weight_scale_inv.t(), self.bias,
                         out_dtype)


class NVFP4Linear(QuantLinear):
    """NVFP4 weight as ModelOpt exports it: ``weight`` uint8 [out, in/2] (two E2M1 values
    a byte), ``weight_scale`` float8_e4m3fn [out, in/16], ``weight_scale_2`` float32 (the
    global scale); activations quantized to NVFP4 per 16 at each call with the static
    global ``input_scale`` (or, with ``static_input=False``, a per-call amax one)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 block_size: int = 16, static_input: bool = True, **kw) -> None:
        super().__init__(in_features, out_features, bias, **kw)
        if in_features % block_size:
            raise ValueError(f"NVFP4Linear: in_features {in_features} is not a multiple of "
                             f"the block size {block_size}")
        dev = kw.get("device")
        self.block_size = block_size
        self.weight = _frozen(torch.zeros(out_features, in_features // 2, dtype=torch.uint8,
                                          device=dev))
        self.weight_scale = _frozen(torch.ones(out_features, in_features // block_size,
                                               dtype=torch.float8_e4m3fn, device=dev))
        self.weight_scale_2 = _frozen(torch.ones((), dtype=torch.float32, device=dev))
        self.input_scale = _frozen(torch.ones((), dtype=torch.float32, device=dev)) \
            if static_input else None

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return dequantize_fp4(self.weight, self.weight_scale, self.block_size,
                              self.weight_scale_2).to(dtype)

    def _weight_only_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.block_size != 16:
            return super()._weight_only_forward(x)
        return nvfp4_weight_linear(x, self.weight, self.weight_scale, self.weight_scale_2,
                                   self.bias)

    def _quantized_forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        xq, xs, xg = quantize_nvfp4(x, self.input_scale, self.block_size)
        fp4 = torch.float4_e2m1fn_x2
        return scaled_mm_nvfp4(xq.view(fp4), xs, xg, self.weight.view(fp4).t(),
                               self.weight_scale, self.weight_scale_2, self.bias, out_dtype)


def set_weight_only(model: nn.Module, weight_only: bool = True) -> int:
    """Switch every packed-weight layer of ``model`` between the format's activation scheme
    and weight-only compute; returns how many layers were switched."""
    n = 0
    for m in model.modules():
        if isinstance(m, QuantLinear):
            m.weight_only = weight_only
            n += 1
    return n
