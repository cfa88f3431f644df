"""Quantizers: full-precision tensors to the formats of :mod:`.dequant` (what the modules
use for activations, and what checkpoint writers use for weights).

Rules (ModelOpt's, which compressed-tensors and the HF ``fp8`` format share):
FP8 E4M3: ``q = saturate(x / scale)`` with ``scale = amax / 448`` (per tensor or per block);
NVFP4: global ``g = amax / (6 * 448)``, per-16 block scale ``s = e4m3(amax_block / 6 / g)``,
``q = e2m1(x / (s * g))``;
MXFP4 (OpenAI's triton_kernels ``downcast_to_mxfp_torch``, the rule transformers quantizes
gpt-oss experts with): per-32 E8M0 scale ``s = 2^ceil(log2(amax_block / 6))``,
``q = e2m1(x / s)`` rounded to nearest, ties away from zero.
"""

from __future__ import annotations

import math

import torch

from .fp4 import E2M1_MAX, pack_fp4, round_to_e2m1
from .scales import expand_block_scale

__all__ = ["E4M3_MAX", "quantize_fp8", "quantize_fp8_blocks", "quantize_mxfp4", "quantize_nvfp4"]

E4M3_MAX = 448.0


def _safe(scale: torch.Tensor) -> torch.Tensor:
    """Scales of all-zero blocks are 0; divide by 1 there (the block quantizes to 0)."""
    return torch.where(scale == 0, torch.ones_like(scale), scale)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` to float8_e4m3fn with one float32 scale (``amax / 448`` when not given):
    returns ``(q, scale)``, ``x ~= q * scale``."""
    if scale is None:
        scale = (x.detach().abs().amax().float() / E4M3_MAX).reshape(())
    s = _safe(scale.float().reshape(()))
    q = (x.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.float().reshape(())


def quantize_fp8_blocks(x: torch.Tensor, block: tuple[int, int] = (128, 128)
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D ``x`` to float8_e4m3fn with one float32 scale per ``block``: returns
    ``(q, scale)`` with ``scale`` of shape [ceil(rows/br), ceil(cols/bc)] (the HF ``fp8``
    format's ``weight_scale_inv``: the dequantization multiplier)."""
    rows, cols = x.shape
    br, bc = block
    gr, gc = math.ceil(rows / br), math.ceil(cols / bc)
    padded = x.new_zeros(gr * br, gc * bc, dtype=torch.float32)
    padded[:rows, :cols] = x.float()
    amax = padded.view(gr, br, gc, bc).abs().amax(dim=(1, 3))
    scale = amax / E4M3_MAX
    full = expand_block_scale(_safe(scale), (rows, cols), block)
    q = (x.float() / full).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def quantize_nvfp4(x: torch.Tensor, global_scale: torch.Tensor | None = None,
                   block_size: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2-D ``x`` [rows, cols] (cols a multiple of ``block_size``) to NVFP4: returns
    ``(packed, block_scale, global_scale)``: uint8 [rows, cols/2], float8_e4m3fn
    [rows, cols/16], float32 scalar; ``x ~= e2m1(packed) * block_scale * global_scale``.
    ``global_scale`` defaults to ``amax / (6 * 448)``; activations pass their static one."""
    rows, cols = x.shape
    if cols % block_size:
        raise ValueError(f"NVFP4 needs the last dimension to be a multiple of {block_size}, "
                         f"got {cols}")
    xf = x.float()
    if global_scale is None:
        global_scale = xf.abs().amax() / (E2M1_MAX * E4M3_MAX)
    g = global_scale.float().reshape(())
    blocks = xf.view(rows, cols // block_size, block_size)
    amax = blocks.abs().amax(dim=-1)
    block_scale = (amax / E2M1_MAX / _safe(g)).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    step = _safe(block_scale.float() * g).unsqueeze(-1)
    codes = round_to_e2m1(blocks / step).view(rows, cols)
    return pack_fp4(codes), block_scale, g


def quantize_mxfp4(x: torch.Tensor, block_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [..., K] (K a multiple of ``block_size``) to MXFP4 along its last dimension:
    returns ``(packed, scale)``: uint8 [..., K/2] and float8_e8m0fnu [..., K/block_size];
    ``x ~= e2m1(packed) * scale``. The scale is the block's ``amax / 6`` rounded up to a
    power of two (so no element saturates), as OpenAI's triton_kernels computes it."""
    cols = x.shape[-1]
    if cols % block_size:
        raise ValueError(f"MXFP4 needs the last dimension to be a multiple of {block_size}, "
                         f"got {cols}")
    blocks = x.float().contiguous().reshape(*x.shape[:-1], cols // block_size, block_size)
    amax = blocks.abs().amax(dim=-1)
    # round amax / 6 up to a power of two on its bits: exponent + 1 unless the mantissa is 0
    bits = ((amax / E2M1_MAX).view(torch.int32) + 0x007FFFFF) & 0x7F800000
    scale = bits.view(torch.float32)
    codes = round_to_e2m1(blocks / _safe(scale).unsqueeze(-1), ties="away")
    byte = (bits >> 23).to(torch.uint8).view(torch.float8_e8m0fnu)
    return pack_fp4(codes.reshape(x.shape)), byte
