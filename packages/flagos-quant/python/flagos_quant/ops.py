"""Scaled matmul entry points for the modules: on flagos tensors the ATen op (routed:
``emulation`` by default, a chip's own FP8/FP4 kernels where its routes say so), on any
other device the emulation itself (a CPU reference of the same arithmetic)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .scaled_mm import emulated_scaled_mm, emulated_scaled_mm_v2

__all__ = ["scaled_mm", "scaled_mm_nvfp4"]


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """``torch._scaled_mm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype)``."""
    if a.device.type == "flagos":
        return torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
    return emulated_scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)


def scaled_mm_nvfp4(a: torch.Tensor, a_scale: torch.Tensor, a_global: torch.Tensor,
                    b: torch.Tensor, b_scale: torch.Tensor, b_global: torch.Tensor,
                    bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """NVFP4 x NVFP4 (packed float4_e2m1fn_x2 operands, unswizzled e4m3 per-16 scales and
    float32 global scales) through ``torch.nn.functional.scaled_mm``'s op."""
    recipe = [int(F.ScalingType.BlockWise1x16), int(F.ScalingType.TensorWise)]
    swizzle = [int(F.SwizzleType.NO_SWIZZLE)]
    args = (a, b, [a_scale, a_global], recipe, swizzle, [b_scale, b_global], recipe, swizzle,
            bias, out_dtype)
    if a.device.type == "flagos":
        return torch._scaled_mm_v2(*args)
    return emulated_scaled_mm_v2(*args)
