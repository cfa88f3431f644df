"""Emulated scaled matmul: ``torch._scaled_mm`` and ``torch._scaled_mm_v2`` (the op behind
``torch.nn.functional.scaled_mm``) computed as dequantize-then-matmul.

The result is exactly ``mm(dequant(a), dequant(b))`` computed in the compute dtype (the
output dtype; float32 for an FP8 output), ``+ bias``, ``x scale_result`` (FP8 outputs),
cast to the output dtype. Operands are dequantized by the rules of :mod:`.dequant` and
rounded once to the compute dtype. Supported scale layouts, per operand (``a`` is
[M, K], ``b`` is [K, N]; ``b``'s scale is described for ``b.t()``, [N, K], as torch
does):

==============  ===========================  ===========================================
recipe          data                         scale of an [R, K] operand
==============  ===========================  ===========================================
TensorWise      float8                       float32, one element
RowWise         float8                       float32 [R, 1]  (b: [1, N])
BlockWise1x128  float8                       float32 [R, ceil(K/128)]  (b: [ceil(K/128), N])
BlockWise128x128 float8                      float32 [ceil(R/128), ceil(K/128)]  (b: its .t())
BlockWise1x32   float8 or float4_e2m1fn_x2   float8_e8m0fnu, one per 32 along K (MX)
BlockWise1x16   float4_e2m1fn_x2             float8_e4m3fn, one per 16 along K (NVFP4),
                                             plus a float32 TensorWise global scale (v2)
==============  ===========================  ===========================================

1x32 and 1x16 scales are in the 128x4 blocked layout for ``_scaled_mm`` (what CUDA
requires) and in the layout the v2 swizzle argument names for ``_scaled_mm_v2``. Unlike
torch's CUDA kernel, strides of scale tensors do not matter here (the values are read by
their logical index), and any recipe of ``a`` may pair with any recipe of ``b``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .dequant import FP8_DTYPES, dequantize_fp4, dequantize_fp8
from .scales import from_blocked

__all__ = ["ScaleRecipe", "dequantize_operand", "emulated_scaled_mm", "emulated_scaled_mm_v2"]

# torch.nn.functional.ScalingType / SwizzleType values (the ints _scaled_mm_v2 takes)
TENSORWISE, ROWWISE, BLOCK_1X16, BLOCK_1X32, BLOCK_1X128, BLOCK_128X128 = range(6)
NO_SWIZZLE, SWIZZLE_32_4_4 = 0, 1
_RECIPE_NAMES = {TENSORWISE: "TensorWise", ROWWISE: "RowWise", BLOCK_1X16: "BlockWise1x16",
                 BLOCK_1X32: "BlockWise1x32", BLOCK_1X128: "BlockWise1x128",
                 BLOCK_128X128: "BlockWise128x128"}
_FP4 = torch.float4_e2m1fn_x2


@dataclass(frozen=True)
class ScaleRecipe:
    """How one operand is scaled: the recipe, whether its block scale is swizzled, and the
    optional global (tensorwise) scale that follows an NVFP4 block scale."""

    recipe: int
    swizzled: bool = False


def _width(t: torch.Tensor) -> int:
    """Elements along K of an [R, K] operand (packed FP4 holds two per byte)."""
    return t.shape[1] * 2 if t.dtype == _FP4 else t.shape[1]


def _detect(t: torch.Tensor, scale: torch.Tensor) -> ScaleRecipe | None:
    """The recipe torch's ``_scaled_mm`` infers for operand ``t`` [R, K] and ``scale``
    (already transposed for b, as torch does), or None."""
    rows, k = t.shape[0], _width(t)
    if t.dtype == _FP4:
        if scale.dtype == torch.float8_e4m3fn:
            return ScaleRecipe(BLOCK_1X16, swizzled=True)
        if scale.dtype == torch.float8_e8m0fnu:
            return ScaleRecipe(BLOCK_1X32, swizzled=True)
        return None
    if scale.dtype == torch.float8_e8m0fnu:
        return ScaleRecipe(BLOCK_1X32, swizzled=True)
    if scale.dtype != torch.float32:
        return None
    if scale.numel() == 1:
        return ScaleRecipe(TENSORWISE)
    if scale.dim() != 2:
        return None
    if tuple(scale.shape) == (rows, 1):
        return ScaleRecipe(ROWWISE)
    if tuple(scale.shape) == (rows, math.ceil(k / 128)):
        return ScaleRecipe(BLOCK_1X128)
    if tuple(scale.shape) == (math.ceil(rows / 128), math.ceil(k / 128)):
        return ScaleRecipe(BLOCK_128X128)
    return None


def dequantize_operand(t: torch.Tensor, scales: list[torch.Tensor], recipe: ScaleRecipe,
                       name: str) -> torch.Tensor:
    """Operand ``t`` [R, K] (FP8, or packed FP4 [R, K/2]) dequantized to float32 [R, K].
    ``scales``: the block (or only) scale, then an optional tensorwise global scale."""
    rows, k = t.shape[0], _width(t)
    r = recipe.recipe
    if len(scales) not in (1, 2) or (len(scales) == 2 and r not in (BLOCK_1X16, BLOCK_1X32)):
        raise ValueError(f"{name}: {_RECIPE_NAMES.get(r, r)} takes one scale, got {len(scales)}")
    scale = scales[0]
    glob = scales[1] if len(scales) == 2 else None
    if r in (BLOCK_1X16, BLOCK_1X32):
        size = 16 if r == BLOCK_1X16 else 32
        want = torch.float8_e4m3fn if r == BLOCK_1X16 else torch.float8_e8m0fnu
        if scale.dtype != want:
            raise ValueError(f"{name}: {_RECIPE_NAMES[r]} scales are {want}, got {scale.dtype}")
        cols = math.ceil(k / size)
        grid = from_blocked(scale, rows, cols) if recipe.swizzled else scale
        if t.dtype == _FP4:
            return dequantize_fp4(t, grid, size, glob)
        if r == BLOCK_1X16:
            raise ValueError(f"{name}: BlockWise1x16 (NVFP4) data is float4_e2m1fn_x2, got {t.dtype}")
        out = dequantize_fp8(t, grid, (1, size))
        return out if glob is None else out * glob.float().reshape(())
    if t.dtype not in FP8_DTYPES:
        raise ValueError(f"{name}: {_RECIPE_NAMES.get(r, r)} data is float8, got {t.dtype}")
    if scale.dtype != torch.float32:
        raise ValueError(f"{name}: {_RECIPE_NAMES.get(r, r)} scales are float32, got {scale.dtype}")
    block = {TENSORWISE: None, ROWWISE: (1, k), BLOCK_1X128: (1, 128),
             BLOCK_128X128: (128, 128)}.get(r)
    if r not in _RECIPE_NAMES:
        raise ValueError(f"{name}: unknown scaling recipe {r}")
    return dequantize_fp8(t, scale, block)


def _compute_dtype(out_dtype: torch.dtype) -> torch.dtype:
    return out_dtype if out_dtype in (torch.bfloat16, torch.float16, torch.float32) \
        else torch.float32


def _finish(a: torch.Tensor, bt: torch.Tensor, bias: torch.Tensor | None,
            scale_result: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    cd = _compute_dtype(out_dtype)
    out = torch.mm(a.to(cd), bt.to(cd).t())
    if bias is not None:
        out = out + bias.to(cd)
    if scale_result is not None:
        out = out * scale_result.float().reshape(()).to(cd)
    return out.to(out_dtype)


def _check_mats(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"scaled mm takes 2-D matrices, got {tuple(a.shape)} and {tuple(b.shape)}")
    if _width(a) != (b.shape[0] * 2 if b.dtype == _FP4 else b.shape[0]):
        raise ValueError(f"scaled mm: a is {tuple(a.shape)} ({a.dtype}), b is {tuple(b.shape)} "
                         f"({b.dtype}): their K dimensions differ")


def emulated_scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                       scale_b: torch.Tensor, bias: torch.Tensor | None = None,
                       scale_result: torch.Tensor | None = None,
                       out_dtype: torch.dtype | None = None,
                       use_fast_accum: bool = False) -> torch.Tensor:
    """``torch._scaled_mm`` by emulation (same arguments); ``use_fast_accum`` is ignored
    (the matmul accumulates as the compute dtype's mm does)."""
    _check_mats(a, b)
    out_dtype = out_dtype or a.dtype
    bt = b.t()
    ra = _detect(a, scale_a)
    # 1x16/1x32 scales of b are blocked over b.t()'s [N, K/block] grid, not transposed
    rb = _detect(bt, scale_b if scale_b.dtype in (torch.float8_e4m3fn, torch.float8_e8m0fnu)
                 else scale_b.t())
    if ra is None or rb is None:
        raise ValueError(
            "scaled mm: unsupported scaling: a is "
            f"{tuple(a.shape)} {a.dtype} with scale {tuple(scale_a.shape)} {scale_a.dtype}, b is "
            f"{tuple(b.shape)} {b.dtype} with scale {tuple(scale_b.shape)} {scale_b.dtype}. "
            "Supported (per operand): float32 tensorwise, rowwise, 1x128 and 128x128 block "
            "scales; float8_e8m0fnu per-32 (MX) and float8_e4m3fn per-16 (NVFP4) scales in "
            "the 128x4 blocked layout")
    sb = scale_b if rb.recipe in (BLOCK_1X16, BLOCK_1X32) else scale_b.t()
    da = dequantize_operand(a, [scale_a], ra, "scale_a")
    db = dequantize_operand(bt, [sb], rb, "scale_b")
    return _finish(da, db, bias, scale_result, out_dtype)


def emulated_scaled_mm_v2(a: torch.Tensor, b: torch.Tensor, scale_a: list[torch.Tensor],
                          recipe_a: list[int], swizzle_a: list[int],
                          scale_b: list[torch.Tensor], recipe_b: list[int],
                          swizzle_b: list[int], bias: torch.Tensor | None = None,
                          out_dtype: torch.dtype | None = None,
                          contraction_dim: list[int] = (),
                          use_fast_accum: bool = False) -> torch.Tensor:
    """``torch._scaled_mm_v2`` (``torch.nn.functional.scaled_mm``) by emulation. Recipes
    are explicit here; an NVFP4 operand passes ``[block_scale, global_scale]`` with
    recipes ``[BlockWise1x16, TensorWise]``."""
    if list(contraction_dim) not in ([], [1, 0]):
        raise ValueError(f"scaled mm: contraction_dim {list(contraction_dim)} is not supported "
                         "(K must be a's dim 1 and b's dim 0)")
    _check_mats(a, b)
    out_dtype = out_dtype or torch.bfloat16

    def operand(t, scales, recipes, swizzles, name):
        recipes = list(recipes)
        if not recipes or len(recipes) != len(scales):
            raise ValueError(f"{name}: {len(scales)} scales but recipes {recipes}")
        if len(recipes) == 2 and recipes[1] != TENSORWISE:
            raise ValueError(f"{name}: the second scale must be TensorWise, got recipe "
                             f"{_RECIPE_NAMES.get(recipes[1], recipes[1])}")
        swizzled = bool(swizzles) and swizzles[0] == SWIZZLE_32_4_4
        if recipes[0] not in (BLOCK_1X16, BLOCK_1X32) and swizzled:
            raise ValueError(f"{name}: only 1x16 and 1x32 scales may be swizzled")
        return dequantize_operand(t, list(scales), ScaleRecipe(recipes[0], swizzled), name)

    if recipe_b and recipe_b[0] in (ROWWISE, BLOCK_1X128, BLOCK_128X128):
        scale_b = [scale_b[0].t(), *scale_b[1:]]
    da = operand(a, scale_a, recipe_a, swizzle_a, "scale_a")
    db = operand(b.t(), scale_b, recipe_b, swizzle_b, "scale_b")
    return _finish(da, db, bias, None, out_dtype)
