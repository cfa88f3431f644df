"""Weight-only linear layers over packed weights as single ops, so that a device with a
fused kernel reads each weight once in its packed form instead of writing and re-reading a
dequantized copy (at batch 1 a linear layer is bound by the bytes of its weight):

- ``flagos_quant::fp8_weight_linear(x, weight, weight_scale, block, bias)``: ``x``
  [..., K] times the FP8 ``weight`` [N, K] dequantized with one float32 scale per
  ``block`` ([bn, bk]; ``weight_scale`` [ceil(N/bn), ceil(K/bk)]: per tensor [N, K] (the
  scale of any one-element shape), per output channel [1, K], DeepSeek / HF ``fp8``
  [128, 128]),
  plus ``bias``: [..., N];
- ``flagos_quant::nvfp4_weight_linear(x, weight, weight_scale, weight_scale_2, bias)``:
  the same for NVFP4 (``weight`` uint8 [N, K/2], e4m3 ``weight_scale`` [N, K/16], float32
  global ``weight_scale_2``).

Both compute ``F.linear(x, dequantized weight rounded to x.dtype, bias)`` in ``x``'s
dtype. Kernels: CPU (that formula), CUDA (a Triton kernel that dequantizes in registers,
:mod:`.triton_linear`, whose one-row launches flagos' launch cache repeats from C++,
``flagos.launch_cache``), Meta; on flagos the ops are routed like every op: ``boxing`` runs
the twin device's kernel (the Triton one on a CUDA twin), ``emulation`` computes the
formula from routed flagos ops where there is no twin. Gradients flow to ``x`` (and
``bias``); the packed weight is frozen.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from flagos import launch_cache

from .dequant import dequantize_fp4, dequantize_fp8

__all__ = ["FP8_WEIGHT_LINEAR", "NVFP4_WEIGHT_LINEAR", "fp8_triton", "fp8_weight_linear",
           "fp8_weight_linear_reference", "nvfp4_triton", "nvfp4_weight_linear",
           "nvfp4_weight_linear_reference"]

FP8_WEIGHT_LINEAR = "flagos_quant::fp8_weight_linear"
NVFP4_WEIGHT_LINEAR = "flagos_quant::nvfp4_weight_linear"

_lib = torch.library.Library("flagos_quant", "DEF")
_lib.define("fp8_weight_linear(Tensor x, Tensor weight, Tensor weight_scale, int[2] block, "
            "Tensor? bias) -> Tensor")
_lib.define("nvfp4_weight_linear(Tensor x, Tensor weight, Tensor weight_scale, "
            "Tensor weight_scale_2, Tensor? bias) -> Tensor")


def _fp8_weight(weight: torch.Tensor, weight_scale: torch.Tensor, block, dtype) -> torch.Tensor:
    block = None if weight_scale.dim() != 2 else tuple(block)  # one scale: checked [N, K]
    return dequantize_fp8(weight, weight_scale, block).to(dtype)


def _nvfp4_weight(weight, weight_scale, weight_scale_2, dtype) -> torch.Tensor:
    return dequantize_fp4(weight, weight_scale, 16, weight_scale_2).to(dtype)


def fp8_weight_linear_reference(x: torch.Tensor, weight: torch.Tensor,
                                weight_scale: torch.Tensor, block: list[int],
                                bias: torch.Tensor | None) -> torch.Tensor:
    """The op's definition: dequantize, round to ``x.dtype``, ``F.linear``."""
    _check_fp8(x, weight, weight_scale, block)
    return F.linear(x, _fp8_weight(weight, weight_scale, block, x.dtype), bias)


def nvfp4_weight_linear_reference(x: torch.Tensor, weight: torch.Tensor,
                                  weight_scale: torch.Tensor, weight_scale_2: torch.Tensor,
                                  bias: torch.Tensor | None) -> torch.Tensor:
    """The op's definition: dequantize, round to ``x.dtype``, ``F.linear``."""
    _check_nvfp4(x, weight)
    return F.linear(x, _nvfp4_weight(weight, weight_scale, weight_scale_2, x.dtype), bias)


def _check_fp8(x, weight, weight_scale, block) -> None:
    if x.dim() < 1 or weight.dim() != 2 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"fp8_weight_linear: x [..., K] and weight [N, K] needed, got "
                         f"{tuple(x.shape)} and {tuple(weight.shape)}")
    if len(block) != 2 or min(block) < 1:
        raise ValueError(f"fp8_weight_linear: block must be [rows, cols] >= 1, got {block}")
    if weight_scale.dim() != 2 and (weight_scale.numel() != 1
                                    or list(block) != list(weight.shape)):
        raise ValueError(f"fp8_weight_linear: a weight_scale that is not 2-D must be one "
                         f"scale for the weight (got shape {tuple(weight_scale.shape)}), "
                         f"with block its shape {list(weight.shape)} (got {list(block)})")


def _check_nvfp4(x, weight) -> None:
    if x.dim() < 1 or weight.dim() != 2 or x.shape[-1] != 2 * weight.shape[1] \
            or x.shape[-1] % 16:
        raise ValueError(f"nvfp4_weight_linear: x [..., K] (K a multiple of 16) and packed "
                         f"weight [N, K/2] needed, got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")


def fp8_triton(x, weight, weight_scale, block, bias):
    """The FP8 op by flagos-quant's Triton kernel on ``x``'s device (the reference formula
    where the kernel takes no such call)."""
    _check_fp8(x, weight, weight_scale, block)
    from . import triton_linear

    out = triton_linear.fp8_linear(x, weight, weight_scale, block, bias)
    return out if out is not None else fp8_weight_linear_reference(
        x, weight, weight_scale, block, bias)


def nvfp4_triton(x, weight, weight_scale, weight_scale_2, bias):
    """The NVFP4 op by flagos-quant's Triton kernel on ``x``'s device (the reference
    formula where the kernel takes no such call)."""
    _check_nvfp4(x, weight)
    from . import triton_linear

    out = triton_linear.nvfp4_linear(x, weight, weight_scale, weight_scale_2, bias)
    return out if out is not None else nvfp4_weight_linear_reference(
        x, weight, weight_scale, weight_scale_2, bias)


def _meta(x, weight, *args):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


for _key, _fp8, _fp4 in (("CPU", fp8_weight_linear_reference, nvfp4_weight_linear_reference),
                         ("Meta", _meta, _meta)):
    _lib.impl("fp8_weight_linear", _fp8, _key)
    _lib.impl("nvfp4_weight_linear", _fp4, _key)
# The CUDA kernels' one-row launches are repeated from C++ on later calls of the same
# argument metadata (decoding at batch 1 is bound by the host's time per call)
launch_cache.register(FP8_WEIGHT_LINEAR, "cuda", fp8_triton)
launch_cache.register(NVFP4_WEIGHT_LINEAR, "cuda", nvfp4_triton)


def _setup(ctx, inputs, output) -> None:
    ctx.inputs = inputs
    ctx.has_bias = inputs[-1] is not None


def _fp8_backward(ctx, grad):
    _, weight, weight_scale, block, bias = ctx.inputs
    gx = grad @ _fp8_weight(weight, weight_scale, block, grad.dtype)
    gb = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias and bias.requires_grad \
        else None
    return gx, None, None, None, gb


def _nvfp4_backward(ctx, grad):
    _, weight, weight_scale, weight_scale_2, bias = ctx.inputs
    gx = grad @ _nvfp4_weight(weight, weight_scale, weight_scale_2, grad.dtype)
    gb = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias and bias.requires_grad \
        else None
    return gx, None, None, None, gb


torch.library.register_autograd(FP8_WEIGHT_LINEAR, _fp8_backward, setup_context=_setup)
torch.library.register_autograd(NVFP4_WEIGHT_LINEAR, _nvfp4_backward, setup_context=_setup)


def _below_autograd_unless_needed(op, x: torch.Tensor, bias: torch.Tensor | None, *args):
    """``op(x, *args)``; when no gradient can flow (grad mode off, or no tensor argument
    requires one) below autograd's dispatch key, whose kernel for these ops is
    Python (``register_autograd``) and would only pass the call on: about 30 us a call on
    the H200's host, a decode layer's whole GPU time. Traced as is under torch.compile."""
    if torch.is_grad_enabled() and torch._C._any_requires_grad(x, bias, *args) \
            or torch.compiler.is_compiling():
        return op(x, *args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(x, *args)


def fp8_weight_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                      block: tuple[int, int] | None, bias: torch.Tensor | None) -> torch.Tensor:
    """``x`` [..., K] times the FP8 ``weight`` [N, K] (``block=None``: one scale for the
    tensor), plus ``bias``, in ``x``'s dtype, through ``flagos_quant::fp8_weight_linear``."""
    if block is None:
        block = weight.shape
        if weight_scale.numel() != 1 or weight_scale.dim() > 2:  # one scale; reshape raises
            weight_scale = weight_scale.reshape(1, 1)
    return _below_autograd_unless_needed(torch.ops.flagos_quant.fp8_weight_linear, x, bias,
                                         weight, weight_scale, list(block), bias)


def nvfp4_weight_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                        weight_scale_2: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x`` [..., K] times the NVFP4 ``weight`` (uint8 [N, K/2]), plus ``bias``, in ``x``'s
    dtype, through ``flagos_quant::nvfp4_weight_linear``."""
    return _below_autograd_unless_needed(torch.ops.flagos_quant.nvfp4_weight_linear, x, bias,
                                         weight, weight_scale, weight_scale_2, bias)
