"""Triton kernels of the weight-only packed linear ops (:mod:`.fused_linear`): each tile of
the weight is loaded in its packed form (one byte per FP8 weight, half a byte per NVFP4
weight plus its scales) and multiplied on the matrix units with float32 accumulation.
FP8 values enter the matmul as they are (exact in bf16, fp16 and fp32) and their float32
scale multiplies each tile's partial sums (a K-tile never straddles a scale block; blocks
narrower than the smallest tile are declined). NVFP4 elements are decoded from their bits
and multiplied by their E4M3 block scale (exact: at most 6 significant bits), the global
scale multiplies the sums. Bias is added in float32. The results differ from the
reference formula (dequantize in float32, round to the activations' dtype, matmul) by the
rounding of the dequantized weight and the order of the sums.

``K`` is a compile-time constant: a model has few distinct ones, the loop's trip count is
then known to the compiler, and Triton's interpreter (the CPU tests) runs the loop.

Triton is imported on the first call; without it (or for a dtype the kernels do not take)
the functions return None and the caller computes the reference formula.
"""

from __future__ import annotations

import functools
import os

import torch

__all__ = ["fp8_linear", "nvfp4_linear"]

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_MIN_BLOCK_K = 64  # the smallest K-tile of the configs
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _configs(triton, small_m: bool):
    if small_m:  # decode: bound by the weight's bytes, so many narrow column tiles
        shapes = [(16, bn, bk, w, st) for bn in (16, 32, 64) for bk in (64, 128, 256)
                  for w, st in ((2, 4), (4, 4))]
    else:
        shapes = [(bm, bn, bk, w, 3) for bm, bn in ((64, 64), (64, 128), (128, 128))
                  for bk in (64, 128) for w in (4, 8)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w,
                          num_stages=st) for bm, bn, bk, w, st in shapes]


def _k_tiles_within_scale_blocks(configs, named_args, **kwargs):
    """The FP8 kernel's tiles along K must not straddle a scale block (one scale per
    output column and tile): keep the configs whose BLOCK_K divides the block, or any
    when the block is the whole K."""
    cols, k = named_args["scale_cols"], named_args["K"]
    return [c for c in configs if cols >= k or cols % c.kwargs["BLOCK_K"] == 0]


@functools.cache
def _kernels():
    try:
        import triton

        from . import _triton_kernels as k
    except ImportError:
        return None

    def tuned(fn, prune=None):
        if os.environ.get("TRITON_INTERPRET") == "1":  # no timing under the interpreter
            return fn, fn
        key = ["N", "K", "M_BUCKET"] + (["scale_cols"] if prune else [])
        pruning = {"early_config_prune": prune} if prune else None
        return tuple(triton.autotune(_configs(triton, small), key=key,
                                     prune_configs_by=pruning)(fn) for small in (True, False))

    return triton, tuned(k.fp8_kernel, _k_tiles_within_scale_blocks), tuned(k.nvfp4_kernel)


def _m_bucket(m: int) -> int:
    return 16 if m <= 16 else min(1 << (m - 1).bit_length(), 4096)


def _launch(kernels, m: int, n: int, *args, **meta) -> None:
    triton, decode, prefill = kernels
    kernel = decode if m <= 16 else prefill
    if not hasattr(kernel, "configs"):  # the interpreter: one small tile shape
        meta.update(BLOCK_M=16, BLOCK_N=32, BLOCK_K=_MIN_BLOCK_K)

    def grid(c):
        return triton.cdiv(n, c["BLOCK_N"]), triton.cdiv(m, c["BLOCK_M"])

    kernel[grid](*args, M_BUCKET=_m_bucket(m), **meta)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
               block: list[int], bias: torch.Tensor | None) -> torch.Tensor | None:
    """``flagos_quant::fp8_weight_linear`` on CUDA tensors; None where the kernel does not
    apply (no Triton, other dtypes, empty operands)."""
    k = _kernels()
    if k is None or x.dtype not in _ACT_DTYPES or weight.dtype not in _FP8_DTYPES \
            or weight_scale.dtype != torch.float32 or weight_scale.dim() != 2 \
            or (bias is not None and bias.dtype != x.dtype) or x.numel() == 0 \
            or weight.numel() == 0 \
            or (block[1] < x.shape[1] and block[1] % _MIN_BLOCK_K):  # tiles would straddle
        return None
    (m, kk), n = x.shape, weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    b = bias if bias is not None else y
    _launch((k[0], *k[1]), m, n, x, weight, weight_scale, b, y, m, n, kk,
            x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
            weight_scale.stride(0), weight_scale.stride(1), y.stride(0), y.stride(1),
            int(block[0]), int(block[1]), HAS_BIAS=bias is not None,
            IEEE=x.dtype == torch.float32)
    return y


def nvfp4_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                 weight_scale_2: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``flagos_quant::nvfp4_weight_linear`` on CUDA tensors; None where the kernel does
    not apply."""
    k = _kernels()
    if k is None or x.dtype not in _ACT_DTYPES or weight.dtype != torch.uint8 \
            or weight_scale.dtype != torch.float8_e4m3fn or weight_scale.dim() != 2 \
            or weight_scale_2.numel() != 1 or (bias is not None and bias.dtype != x.dtype) \
            or x.numel() == 0 or weight.numel() == 0:
        return None
    (m, kk), n = x.shape, weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    b = bias if bias is not None else y
    _launch((k[0], *k[2]), m, n, x, weight, weight_scale, weight_scale_2.reshape(1).float(),
            b, y, m, n, kk, x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
            weight_scale.stride(0), weight_scale.stride(1), y.stride(0), y.stride(1),
            HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32)
    return y
