"""FlagGems kernels that index their tensors by flat memory offset, run only on the calls
they compute exactly.

On compute capability 9 (Hopper) FlagGems 5.0 registers, in place of its generic kernels,
the ones of ``flag_gems/runtime/backend/_nvidia/hopper/ops/``: ``mul`` (when both
operands have the same rank), ``sqrt``, ``sqrt_`` and the in-place and ``out=`` forms of
``fill``. They read and write ``numel()`` elements from each tensor's first element,
ignoring shapes and strides, and allocate the result like the first operand. They are
right for dense tensors of one layout and dtype and wrong otherwise:
``[2, 1] * [1, 16]`` returns a ``[2, 1]`` tensor, an operand expanded to the result's shape
is read as if it were dense, ``x[:, 0].fill_(1)`` writes the first elements of ``x``.
On plain CUDA tensors with ``flag_gems.enable()`` the same calls are just as wrong (on the
H200 a Diffusers ``UNet2DModel`` fails in its time embedding and a Llama's logits are off
by 0.37). The provider runs these kernels only where their flat indexing is exact and
declines every other call, which the chain's next provider then runs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

__all__ = ["guard_flat_kernel", "is_dense"]

_HOPPER_OPS = os.path.join("runtime", "backend", "_nvidia", "hopper", "ops")


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill ``numel()`` consecutive elements of memory from its
    first one (non-overlapping and dense, in any dimension order)."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((s, n) for n, s in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _mul_exact(a: object, b: object, *_: object, **__: object) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) \
            or a.dim() != b.dim() or a.is_complex() or b.is_complex():
        return True  # FlagGems' generic pointwise kernels serve these
    return (a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and a.device == b.device and is_dense(a))


def _sqrt_exact(a: torch.Tensor, *_: object, **__: object) -> bool:
    return a.is_floating_point() and is_dense(a)  # the result takes the input's dtype


def _self_dense(a: torch.Tensor, *_: object, **__: object) -> bool:
    return is_dense(a)


def _out_dense(*_: object, out: torch.Tensor | None = None, **__: object) -> bool:
    return out is None or is_dense(out)


# (file in the hopper ops folder, function) -> whether a call's flat indexing is exact
_EXACT: dict[tuple[str, str], Callable[..., bool]] = {
    ("mul.py", "mul"): _mul_exact,
    ("sqrt.py", "sqrt"): _sqrt_exact,
    ("sqrt.py", "sqrt_"): _self_dense,
    ("fill.py", "fill_scalar_"): _self_dense,
    ("fill.py", "fill_tensor_"): _self_dense,
    ("fill.py", "fill_scalar_out"): _out_dense,
    ("fill.py", "fill_tensor_out"): _out_dense,
}


def _exactness_check(fn: Callable[..., object]) -> Callable[..., bool] | None:
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    folder, file = os.path.split(code.co_filename)
    if not folder.endswith(_HOPPER_OPS):
        return None
    return _EXACT.get((file, fn.__name__))


def guard_flat_kernel(fn: Callable[..., object]) -> Callable[..., object]:
    """``fn``, or, for one of the flat-indexing kernels above, ``fn`` returning
    NotImplemented (the call is declined) where its result would not be exact."""
    exact = _exactness_check(fn)
    if exact is None:
        return fn

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if not exact(*args, **kwargs):
            return NotImplemented
        return fn(*args, **kwargs)

    return guarded
