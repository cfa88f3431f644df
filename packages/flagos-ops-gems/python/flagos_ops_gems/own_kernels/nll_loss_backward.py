"""``aten::nll_loss_backward``: the gradient of the negative log-likelihood loss.

The gradient of a ``[N, C]`` (or ``[C]``) input is zero except at each row's target
column, which holds ``-weight[target] * grad`` (``grad`` the row's incoming gradient, or
the scalar one, divided by the total weight for the mean). FlagGems 5.0's kernel first
zeroes the result and then stores at ``row * C + target``, so an ignored target
(``ignore_index=-100`` by default) stores a zero before the result's memory or into
another row. This kernel writes every element of the result once, in one pass (zeros and
target columns alike), so an ignored row is left zero; a target out of range is reported
as ATen reports it. For a language model's loss this result is the size of the logits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._kernel_guards import is_dense

__all__ = ["nll_loss_backward"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BLOCK = 1024
_MEAN = 1  # at::Reduction::Mean; 0 None, 2 Sum


@triton.jit
def _nll_loss_backward_kernel(grad_ptr, target_ptr, weight_ptr, total_weight_ptr, out_ptr,
                              bad_ptr, C, so0, so1, sg, st, ignore_index,
                              HAS_WEIGHT: tl.constexpr, MEAN: tl.constexpr, FP64: tl.constexpr,
                              BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < C
    t = tl.load(target_ptr + row * st).to(tl.int64)
    counted = t != ignore_index
    in_range = (t >= 0) & (t < C)
    if tl.program_id(1) == 0:
        # a target out of range (not ignored): flagged, with its value, for the caller,
        # which raises
        bad = counted & (in_range == 0)
        tl.store(bad_ptr, 1, mask=bad)
        tl.store(bad_ptr + 1, t, mask=bad)
    if FP64:
        g = tl.load(grad_ptr + row * sg).to(tl.float64)
    else:
        g = tl.load(grad_ptr + row * sg).to(tl.float32)
    if MEAN:
        g = g / tl.load(total_weight_ptr).to(g.dtype)
    if HAS_WEIGHT:
        w = tl.load(weight_ptr + t, mask=counted & in_range, other=0).to(g.dtype)
    else:
        w = 1.0
    value = tl.where((cols == t) & counted & in_range, -w * g, 0.0)
    tl.store(out_ptr + row * so0 + cols * so1, value.to(out_ptr.dtype.element_ty), mask=mask)


def nll_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None = None, reduction: int = _MEAN,
                      ignore_index: int = -100, total_weight: torch.Tensor | None = None
                      ) -> torch.Tensor:
    """The gradient of ``nll_loss(self, target, weight, reduction, ignore_index)`` with
    respect to ``self``, as ATen computes it, or NotImplemented for a call this kernel does
    not take (an input of another dtype or rank, operands on several devices, a target
    or gradient of another shape). A target out of range raises IndexError."""
    if self.dtype not in _DTYPES or self.dim() not in (1, 2) or total_weight is None:
        return NotImplemented
    tensors = [grad_output, target, total_weight] + ([] if weight is None else [weight])
    if any(t.device != self.device for t in tensors) or target.dtype.is_floating_point:
        return NotImplemented
    n = 1 if self.dim() == 1 else self.shape[0]
    c = self.shape[-1]
    if target.numel() != n or target.dim() != self.dim() - 1:
        return NotImplemented
    if weight is not None and (weight.shape != (c,) or weight.stride() != (1,)):
        return NotImplemented
    per_row = reduction == 0 and self.dim() == 2
    if grad_output.numel() != (n if per_row else 1):
        return NotImplemented
    out = torch.empty_like(self) if is_dense(self) else torch.empty(self.shape, dtype=self.dtype,
                                                                    device=self.device)
    if out.numel() == 0:
        return out
    bad = torch.zeros(2, dtype=torch.int64, device=self.device)
    so = out.stride() if out.dim() == 2 else (0, out.stride(0))
    _nll_loss_backward_kernel[(n, triton.cdiv(c, _BLOCK))](
        grad_output, target, weight if weight is not None else out, total_weight, out, bad,
        c, so[0], so[1], grad_output.stride(0) if per_row else 0,
        target.stride(0) if target.dim() else 0, ignore_index,
        HAS_WEIGHT=weight is not None, MEAN=reduction == _MEAN,
        FP64=self.dtype == torch.float64, BLOCK=_BLOCK)
    flagged, value = bad.tolist()
    if flagged:
        raise IndexError(f"Target {value} is out of bounds.")
    return out
