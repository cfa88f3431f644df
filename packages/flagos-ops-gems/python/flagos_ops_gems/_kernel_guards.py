"""FlagGems kernels with layout or shape assumptions that ATen's kernels do not make, run
only on the calls they compute as ATen does; every other call is declined, and the chain's
next provider runs it.

Generic kernels (``flag_gems/ops/``), on every chip:

- ``native_group_norm`` and its backward mask a group's rows by ``channel < C`` instead of
  by the group's own channel count, so where ``C / groups`` is not a power of two each
  group also reads (and its backward writes) the first channels of the next group: a
  Diffusers UNet with 96 channels in 32 groups gets wrong activations.
- ``upsample_nearest2d`` reads its input as a contiguous NCHW tensor: a channels-last input
  (a UNet's upsampler after a convolution) is read in the wrong order.
- ``slice_backward`` reads the incoming gradient as contiguous: a gradient that is a view
  (a rotary embedding's half, ``[..., :d/2]``) is read in the wrong order.

Hopper kernels: on compute capability 9 FlagGems 5.0 registers, in place of its generic
kernels, the ones of ``flag_gems/runtime/backend/_nvidia/hopper/ops/``:

- ``mul`` (when both operands have the same rank), ``sqrt``, ``sqrt_`` and the in-place
  and ``out=`` forms of ``fill`` read and write ``numel()`` elements from each tensor's
  first element, ignoring shapes and strides, with 32-bit offsets, and allocate the result
  like the first operand. They are right for dense tensors of one layout and dtype and
  wrong otherwise: ``[2, 1] * [1, 16]`` returns a ``[2, 1]`` tensor, an operand expanded
  to the result's shape is read as if it were dense, ``x[:, 0].fill_(1)`` writes the
  first elements of ``x``; past 2**31 elements the offsets overflow. ``sqrt`` computes in
  float32 and keeps the input's dtype (integers are truncated, float64 loses precision).
- ``mm`` and ``mm.out`` build TMA descriptors for float16, bfloat16 and float32 when N and
  K suit them, which need 16-byte aligned bases and leading strides and non-empty shapes
  (offset slices, expanded operands and empty matrices raise); their N == 1 kernel writes
  the result as if its rows were contiguous; ``out=`` is never resized.

On plain CUDA tensors with ``flag_gems.enable()`` the same calls are just as wrong (on the
H200 a Diffusers ``UNet2DModel`` fails in its time embedding and a Llama's logits are off
by 0.37, from ``mul``). Through the gems routes on the H200, shadow verification found the
generic ones: ``native_group_norm`` and ``upsample_nearest2d`` in a ``UNet2DModel``,
whose output then differs in every element, and ``slice_backward`` in a Llama's gradients.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

__all__ = ["guard_kernel", "is_dense"]

_GENERIC_OPS = os.path.join("flag_gems", "ops")
_HOPPER_OPS = os.path.join("runtime", "backend", "_nvidia", "hopper", "ops")
_MAX_FLAT = 2**31 - 2**16  # 32-bit offsets, with a block's worth of masked lanes to spare
# the floating dtypes FlagGems' Hopper kernels are written for -> elements per 16 bytes
_PER_16_BYTES = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}


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


def _flat_ok(t: torch.Tensor) -> bool:
    return t.numel() <= _MAX_FLAT and is_dense(t)


def _mul_exact(a: object, b: object, *_: object, **__: object) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return True  # a Python scalar: FlagGems' generic pointwise kernel
    if a.is_complex() or b.is_complex():  # its own complex path: the result takes a's shape
        return a.shape == b.shape and a.device == b.device
    if a.dim() != b.dim():
        return True  # FlagGems' generic pointwise kernel
    return (a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and a.device == b.device and _flat_ok(a))


def _sqrt_exact(a: torch.Tensor, *_: object, **__: object) -> bool:
    return a.dtype in _PER_16_BYTES and _flat_ok(a)


def _self_flat(a: torch.Tensor, *_: object, **__: object) -> bool:
    return _flat_ok(a)


def _out_flat(a: torch.Tensor, *_: object, out: torch.Tensor | None = None,
              **__: object) -> bool:
    return out is None or (out.shape == a.shape and _flat_ok(out))


def _tma_ok(t: torch.Tensor, element_size: int) -> bool:
    """What a TMA descriptor of ``t`` (or of ``t.T`` when column-major) needs."""
    s0, s1 = t.stride()
    if s0 > 1 and s1 > 1:
        return True  # FlagGems makes it contiguous first
    if s0 == 0 or s1 == 0 or t.data_ptr() % 16:
        return False
    return ((s0 if s1 == 1 else s1) * element_size) % 16 == 0


def _mm_exact(a: torch.Tensor, b: torch.Tensor, *_: object,
              out: torch.Tensor | None = None, **__: object) -> bool:
    dtype = a.dtype
    per_16_bytes = _PER_16_BYTES.get(dtype)
    if per_16_bytes is None or b.dtype != dtype:
        return False
    sa, sb = a.shape, b.shape
    if len(sa) != 2 or len(sb) != 2:
        return False
    (m, k), (kb, n) = sa, sb
    if k != kb or m == 0 or n == 0 or k == 0:
        return False
    if out is not None and (out.shape != (m, n) or out.dtype != dtype):
        return False  # ATen would resize or refuse; FlagGems writes it as it is
    if n == 1:  # its matrix-vector kernel writes row i at offset i
        return out is None or out.stride(0) == 1 or m == 1
    if n % per_16_bytes or k % per_16_bytes:
        return True  # no TMA: its general kernel takes any strides
    size = 16 // per_16_bytes
    return _tma_ok(a, size) and _tma_ok(b, size) and (
        out is None or (out.is_contiguous() and out.data_ptr() % 16 == 0))


def _groups_of_power_of_two(*args: object, **__: object) -> bool:
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps) and
    # native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, mask)
    c, groups = (args[4], args[6]) if len(args) == 8 else (args[6], args[8])
    per_group = c // groups if groups else 0
    return per_group > 0 and per_group & (per_group - 1) == 0


def _input_contiguous(a: torch.Tensor, *_: object, **__: object) -> bool:
    return a.is_contiguous()


# (file in the generic ops folder, function) -> whether the kernel computes a call exactly
_GENERIC_EXACT: dict[tuple[str, str], Callable[..., bool]] = {
    ("groupnorm.py", "group_norm"): _groups_of_power_of_two,
    ("groupnorm.py", "group_norm_backward"): _groups_of_power_of_two,
    ("upsample_nearest2d.py", "upsample_nearest2d"): _input_contiguous,
    ("slice_backward.py", "slice_backward"): _input_contiguous,
}

# (file in the hopper ops folder, function) -> whether the kernel computes a call exactly
_HOPPER_EXACT: dict[tuple[str, str], Callable[..., bool]] = {
    ("mul.py", "mul"): _mul_exact,
    ("sqrt.py", "sqrt"): _sqrt_exact,
    ("sqrt.py", "sqrt_"): _sqrt_exact,
    ("fill.py", "fill_scalar_"): _self_flat,
    ("fill.py", "fill_tensor_"): _self_flat,
    ("fill.py", "fill_scalar_out"): _out_flat,
    ("fill.py", "fill_tensor_out"): _out_flat,
    ("mm.py", "mm"): _mm_exact,
    ("mm.py", "mm_out"): _mm_exact,
}


def _exactness_check(fn: Callable[..., object]) -> Callable[..., bool] | None:
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    folder, file = os.path.split(code.co_filename)
    for suffix, table in ((_HOPPER_OPS, _HOPPER_EXACT), (_GENERIC_OPS, _GENERIC_EXACT)):
        if folder.endswith(suffix):
            return table.get((file, fn.__name__))
    return None


def guard_kernel(fn: Callable[..., object]) -> Callable[..., object]:
    """``fn``, or, for one of the kernels above, ``fn`` returning NotImplemented (the call
    is declined) where its result would differ from ATen's."""
    exact = _exactness_check(fn)
    if exact is None:
        return fn

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if not exact(*args, **kwargs):
            return NotImplemented
        return fn(*args, **kwargs)

    return guarded
