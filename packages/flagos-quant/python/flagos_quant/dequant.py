"""Dequantization rules of the FP8 and FP4 formats real checkpoints use.

Every rule gives the exact product element x block scale [x global scale] rounded once
to float32 (each factor is converted to float32 exactly; element x block scale has at
most 8 significant bits, so it is exact, and only the last product rounds). Results are
float32; callers cast to their compute dtype.
"""

from __future__ import annotations

import torch

from .fp4 import unpack_fp4
from .scales import expand_block_scale

__all__ = ["FP8_DTYPES", "dequantize_fp4", "dequantize_fp4_over_global", "dequantize_fp8"]

FP8_DTYPES = frozenset({torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                        torch.float8_e5m2fnuz})


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor,
                   block: tuple[int, int] | None = None) -> torch.Tensor:
    """FP8 ``q`` [rows, cols] times ``scale`` in blocks of ``block`` elements (None: one
    scale for the tensor). Tensorwise: ``block=None``; rowwise: ``(1, cols)``; DeepSeek /
    HF ``fp8``: ``(128, 128)`` weights, ``(1, 128)`` activations; MXFP8: ``(1, 32)``
    with float8_e8m0fnu scales."""
    if q.dtype not in FP8_DTYPES:
        raise TypeError(f"FP8 data must be one of {sorted(map(str, FP8_DTYPES))}, got {q.dtype}")
    values = q.float()
    if block is None:
        if scale.numel() != 1:
            raise ValueError(f"a tensorwise scale has one element, got shape {tuple(scale.shape)}")
        return values * scale.float().reshape(())
    if q.dim() != 2:
        raise ValueError(f"block-scaled FP8 data must be 2-D, got shape {tuple(q.shape)}")
    return values * expand_block_scale(scale, tuple(q.shape), block)


def dequantize_fp4(packed: torch.Tensor, scale: torch.Tensor, block_size: int,
                   global_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Packed E2M1 ``packed`` [rows, cols/2] times its per-``block_size`` scale along the
    rows (NVFP4: 16, float8_e4m3fn scales and a float32 ``global_scale``; MXFP4: 32,
    float8_e8m0fnu scales, no global scale). Returns [rows, cols] float32."""
    if packed.dim() != 2:
        raise ValueError(f"packed FP4 data must be 2-D, got shape {tuple(packed.shape)}")
    values = unpack_fp4(packed)
    out = values * expand_block_scale(scale, tuple(values.shape), (1, block_size))
    if global_scale is not None:
        if global_scale.numel() != 1:
            raise ValueError("the FP4 global scale has one element, got shape "
                             f"{tuple(global_scale.shape)}")
        out = out * global_scale.float().reshape(())
    return out


def dequantize_fp4_over_global(packed: torch.Tensor, scale: torch.Tensor, block_size: int,
                               global_scale: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' NVFP4 rule: E2M1 ``packed`` [rows, cols/2] times
    ``scale / global_scale`` (its ``weight_global_scale`` divides, the reciprocal of
    ModelOpt's ``weight_scale_2``): the quotient rounded to float32 per block, then the
    product rounded once to float32, as compressed-tensors computes it. [rows, cols]
    float32."""
    if packed.dim() != 2:
        raise ValueError(f"packed FP4 data must be 2-D, got shape {tuple(packed.shape)}")
    if global_scale.numel() != 1:
        raise ValueError("the FP4 global scale has one element, got shape "
                         f"{tuple(global_scale.shape)}")
    values = unpack_fp4(packed)
    step = scale.float() / global_scale.float().reshape(())
    return values * expand_block_scale(step, tuple(values.shape), (1, block_size))
