"""``aten::native_group_norm`` and its backward for any number of channels per group.

FlagGems 5.0 masks a group's rows by ``channel < C`` instead of by the group's own channel
count, so where ``C / groups`` is not a power of two each group also reads the first
channels of the next one (Stable Diffusion's UNet has 320 channels in 32 groups). This
kernel normalizes each (sample, group) over exactly its own ``C / groups * HxW``
elements: the mean first, then the biased variance about it (two passes, in float32, or
float64 for float64 input), then the affine result. The backward takes ATen's formulation:
per (sample, channel) sums of ``dy * x`` and ``dy`` in one kernel, the per-group
coefficients from them (small tensors, through the device's own ops), and ``dx`` in a
second kernel; the weight's and bias's gradients are sums of the first over samples. The blocks a group takes are a
compile-time count (one compiled kernel per group size in a model): Triton's interpreter
cannot loop to a bound given at run time with NumPy 2.4.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["native_group_norm", "native_group_norm_backward"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BLOCK = 1024


@triton.jit
def _group_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, group_size, hw,
                       per_group, groups, eps, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                       FP64: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    ng = tl.program_id(0).to(tl.int64)  # sample * groups + group
    base = ng * group_size
    if FP64:
        total = tl.zeros((BLOCK,), tl.float64)
    else:
        total = tl.zeros((BLOCK,), tl.float32)
    acc_type = total.dtype
    for i in range(ITERS):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        total += tl.load(x_ptr + base + offs, mask=offs < group_size, other=0).to(acc_type)
    mean = tl.sum(total, 0) / group_size
    squares = tl.zeros((BLOCK,), acc_type)
    for i in range(ITERS):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        mask = offs < group_size
        d = tl.load(x_ptr + base + offs, mask=mask, other=0).to(acc_type) - mean
        squares += tl.where(mask, d * d, 0)
    rstd = 1 / tl.sqrt(tl.sum(squares, 0) / group_size + eps)
    tl.store(mean_ptr + ng, mean.to(mean_ptr.dtype.element_ty))
    tl.store(rstd_ptr + ng, rstd.to(rstd_ptr.dtype.element_ty))
    first_channel = (ng % groups) * per_group
    for i in range(ITERS):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        mask = offs < group_size
        y = (tl.load(x_ptr + base + offs, mask=mask, other=0).to(acc_type) - mean) * rstd
        channel = first_channel + offs // hw
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + channel, mask=mask, other=1).to(acc_type)
        if HAS_BIAS:
            y = y + tl.load(b_ptr + channel, mask=mask, other=0).to(acc_type)
        tl.store(y_ptr + base + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def native_group_norm(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      N: int, C: int, HxW: int, group: int, eps: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | object:
    """``(out, mean, rstd)`` as ATen's ``native_group_norm`` computes them, or
    NotImplemented for a call this kernel does not take (a non-contiguous input, a dtype
    other than float16, bfloat16, float32, float64, no elements)."""
    if input.dtype not in _FLOATS or not input.is_contiguous() or input.numel() == 0 \
            or group <= 0 or C % group or input.numel() != N * C * HxW:
        return NotImplemented
    params = [t for t in (weight, bias) if t is not None]
    if any(t.device != input.device or t.dtype not in _FLOATS or t.numel() != C
           or not t.is_contiguous() for t in params):
        return NotImplemented
    # ATen's statistics are in the input's dtype, or float32 where the parameters' differs
    mixed = any(t.dtype != input.dtype for t in params)
    stats_dtype = torch.float32 if mixed else input.dtype
    out = torch.empty_like(input)
    mean = torch.empty((N, group), dtype=stats_dtype, device=input.device)
    rstd = torch.empty((N, group), dtype=stats_dtype, device=input.device)
    per_group = C // group
    _group_norm_kernel[(N * group,)](
        input, weight if weight is not None else input, bias if bias is not None else input,
        out, mean, rstd, per_group * HxW, HxW, per_group, group, float(eps),
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        FP64=input.dtype == torch.float64, BLOCK=_BLOCK, ITERS=triton.cdiv(per_group * HxW, _BLOCK))
    return out, mean, rstd


@triton.jit
def _channel_sums_kernel(dy_ptr, x_ptr, ds_ptr, db_ptr, hw, FP64: tl.constexpr,
                         BLOCK: tl.constexpr, ITERS: tl.constexpr):
    nc = tl.program_id(0).to(tl.int64)  # sample * C + channel
    if FP64:
        ds = tl.zeros((BLOCK,), tl.float64)
    else:
        ds = tl.zeros((BLOCK,), tl.float32)
    db = tl.zeros((BLOCK,), ds.dtype)
    for i in range(ITERS):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        mask = offs < hw
        dy = tl.load(dy_ptr + nc * hw + offs, mask=mask, other=0).to(ds.dtype)
        ds += dy * tl.load(x_ptr + nc * hw + offs, mask=mask, other=0).to(ds.dtype)
        db += dy
    tl.store(ds_ptr + nc, tl.sum(ds, 0))
    tl.store(db_ptr + nc, tl.sum(db, 0))


@triton.jit
def _grad_input_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, c2_ptr, c3_ptr, dx_ptr, n, C, hw,
                       per_group, HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    nc = offs // hw
    ng = (nc // C) * (C // per_group) + (nc % C) // per_group
    rstd = tl.load(rstd_ptr + ng, mask=mask, other=0)
    scale = rstd
    if HAS_WEIGHT:
        scale = rstd * tl.load(w_ptr + nc % C, mask=mask, other=0).to(rstd.dtype)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0).to(rstd.dtype)
    x = tl.load(x_ptr + offs, mask=mask, other=0).to(rstd.dtype)
    dx = scale * dy + tl.load(c2_ptr + ng, mask=mask, other=0) * x \
        + tl.load(c3_ptr + ng, mask=mask, other=0)
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def native_group_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                               rstd: torch.Tensor, weight: torch.Tensor | None, N: int, C: int,
                               HxW: int, group: int, output_mask: list[bool]
                               ) -> tuple[torch.Tensor | None, ...] | object:
    """``(grad_input, grad_weight, grad_bias)`` as ATen's ``native_group_norm_backward``
    computes them (None where ``output_mask`` asks for none), or NotImplemented for a call
    this kernel does not take (the dtypes and shapes the forward does not take)."""
    if (input.dtype not in _FLOATS or grad_out.dtype != input.dtype or input.numel() == 0
            or group <= 0 or C % group or input.numel() != N * C * HxW
            or grad_out.shape != input.shape or mean.numel() != N * group
            or rstd.numel() != N * group):
        return NotImplemented
    if weight is not None and (weight.dtype not in _FLOATS or weight.numel() != C
                               or weight.device != input.device):
        return NotImplemented
    acc = torch.float64 if input.dtype == torch.float64 else torch.float32
    x, dy = input.contiguous(), grad_out.contiguous()
    per_group = C // group
    ds = torch.empty((N, C), dtype=acc, device=input.device)
    db = torch.empty((N, C), dtype=acc, device=input.device)
    _channel_sums_kernel[(N * C,)](dy, x, ds, db, HxW, FP64=acc == torch.float64, BLOCK=_BLOCK,
                                   ITERS=triton.cdiv(HxW, _BLOCK))
    mean_g = mean.reshape(N, group, 1).to(acc)
    rstd_g = rstd.reshape(N, group, 1).to(acc)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        w = weight.reshape(1, group, per_group).to(acc) if weight is not None else 1
        ds_w = (ds.reshape(N, group, per_group) * w).sum(-1, keepdim=True)
        db_w = (db.reshape(N, group, per_group) * w).sum(-1, keepdim=True)
        s = 1.0 / (per_group * HxW)
        c2 = (db_w * mean_g - ds_w) * rstd_g * rstd_g * rstd_g * s
        c3 = -c2 * mean_g - db_w * rstd_g * s
        grad_input = torch.empty_like(x)
        n = x.numel()
        _grad_input_kernel[(triton.cdiv(n, _BLOCK),)](
            dy, x, weight.contiguous() if weight is not None else x, rstd_g.contiguous(),
            c2.contiguous(), c3.contiguous(), grad_input, n, C, HxW, per_group,
            HAS_WEIGHT=weight is not None, BLOCK=_BLOCK)
    param_dtype = weight.dtype if weight is not None else input.dtype
    if output_mask[1]:
        per_channel = (ds.reshape(N, group, per_group) - db.reshape(N, group, per_group) * mean_g)
        grad_weight = (per_channel * rstd_g).sum(0).reshape(C).to(param_dtype)
    if output_mask[2]:
        grad_bias = db.sum(0).to(param_dtype)
    return grad_input, grad_weight, grad_bias
