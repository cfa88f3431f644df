"""Calls with expanded tensor arguments, declined for libraries that ask for it.

An expanded tensor (``t.expand(...)``, a broadcast view) has stride 0 on a dimension of
size above 1: one element stands for many. Through the gems route on the H200,
FlagGems 5.0.2's ``mul.Tensor`` with such an operand of the result's full shape returned
wrong values (``torch.ones(()).expand(4, 8, 64) * y`` off by up to 4.1; the gradient of
``x.square().sum()``, whose backward multiplies by the expanded gradient of ``sum``, off
by thousands), while the same call with a dense operand, a scalar, or a size-1 broadcast
dimension was right. Whether FlagGems on plain CUDA tensors does the same was not
measured. A library that sets
:attr:`~flagos_ops_gems.KernelLibrary.declines_expanded_tensors` has such calls declined:
the chain's next provider (boxing on the cuda HAL: ATen's CUDA kernel, zero-copy) runs
them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

__all__ = ["decline_expanded"]


def _expanded(t: torch.Tensor) -> bool:
    strides = t.stride()
    return 0 in strides and any(s == 0 and n > 1 for n, s in zip(t.shape, strides))


def _any_expanded(values) -> bool:
    for v in values:
        if isinstance(v, torch.Tensor):
            if _expanded(v):
                return True
        elif isinstance(v, (list, tuple)) and any(
                isinstance(t, torch.Tensor) and _expanded(t) for t in v):
            return True
    return False


def decline_expanded(kernel: Callable[..., object]) -> Callable[..., object]:
    """``kernel``, returning NotImplemented (the call is declined) when a tensor argument,
    or one in a list argument, is expanded."""

    @functools.wraps(kernel)
    def guarded(*args, **kwargs):
        if _any_expanded(args) or (kwargs and _any_expanded(kwargs.values())):
            return NotImplemented
        return kernel(*args, **kwargs)

    return guarded
