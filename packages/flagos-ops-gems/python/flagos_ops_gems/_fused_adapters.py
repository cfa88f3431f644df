"""FlagGems' fused kernels under the fused ATen ops flagos routes.

FlagGems replaces ``aten::rms_norm`` (CompositeImplicitAutograd) on CUDA with its own
autograd function over ``rms_norm_forward`` / ``rms_norm_backward``. On flagos,
``rms_norm`` reaches the dispatcher as ``aten::_fused_rms_norm`` and its backward as
``aten::_fused_rms_norm_backward`` (as on CUDA); these adapters serve those two with the
same two FlagGems kernels, so a gems route runs FlagGems' RMS norm whole instead of five
decomposed ops. What the kernels do not cover (no weight, non-float dtypes) is declined
and the chain's next provider runs.

FlagGems' ``native_layer_norm`` returns its mean and inverse deviation flat (``[M]``);
ATen's contract, on every device, is the input's shape with the normalized dimensions
kept as ones (``[*, 1, ..., 1]``), which is what a caller and ATen's own backward read.
``layer_norm_statistics_as_aten`` views them so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

__all__ = ["fused_kernels", "layer_norm_statistics_as_aten"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _default_eps(dtype: torch.dtype) -> float:
    # ATen's default: the epsilon of the input's math type (float32 for half types).
    return torch.finfo(torch.promote_types(dtype, torch.float32)).eps


def _rstd_shape(x: torch.Tensor, normalized: int) -> list[int]:
    return list(x.shape[:x.dim() - normalized]) + [1] * normalized


def layer_norm_statistics_as_aten(layer_norm: Callable) -> Callable:
    """``layer_norm`` (FlagGems' ``native_layer_norm``, or its guard) with its mean and
    inverse deviation viewed to ATen's shape; a declined call stays declined."""

    @functools.wraps(layer_norm)
    def native_layer_norm(input, normalized_shape, *args, **kwargs):
        result = layer_norm(input, normalized_shape, *args, **kwargs)
        if result is NotImplemented:
            return result
        out, mean, rstd = result
        shape = _rstd_shape(input, len(normalized_shape))
        return out, mean.view(shape), rstd.view(shape)

    return native_layer_norm


def _adapters(forward: Callable, backward: Callable) -> dict[str, Callable]:
    def fused_rms_norm(input, normalized_shape, weight=None, eps=None):
        if weight is None or input.dtype not in _FLOATS or weight.dtype != input.dtype \
                or input.numel() == 0:
            return NotImplemented
        eps = _default_eps(input.dtype) if eps is None else eps
        y, inv_rms = forward(input, list(normalized_shape), weight, eps)
        return y, inv_rms.view(_rstd_shape(input, len(normalized_shape)))

    def fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask):
        if weight is None or input.dtype not in _FLOATS or weight.dtype != input.dtype \
                or input.numel() == 0 or rstd.dtype != torch.float32:
            return NotImplemented
        rows = math.prod(input.shape[:input.dim() - len(normalized_shape)])
        dx, dw = backward(grad_out, input, rstd.reshape(rows).contiguous(),
                          list(normalized_shape), weight)
        return (dx.view(input.shape) if output_mask[0] else None,
                dw.view(weight.shape) if output_mask[1] else None)

    # What each adapter serves with: FlagGems' function, whose source a replay admission's
    # digest covers (replay_admission.source_digest unwraps to it).
    fused_rms_norm.__wrapped__ = forward
    fused_rms_norm_backward.__wrapped__ = backward
    return {"aten::_fused_rms_norm": fused_rms_norm,
            "aten::_fused_rms_norm_backward": fused_rms_norm_backward}


def fused_kernels(flag_gems) -> dict[str, Callable]:
    """The fused-op adapters the installed FlagGems has kernels for (none if its RMS norm
    functions are missing)."""
    ops = getattr(flag_gems, "ops", None)
    forward = getattr(ops, "rms_norm_forward", None)
    backward = getattr(ops, "rms_norm_backward", None)
    if forward is None or backward is None:
        return {}
    return _adapters(forward, backward)
